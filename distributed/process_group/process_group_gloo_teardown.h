// distributed/process_group/process_group_gloo_teardown.h — internal to the Gloo backend: the
// group's Gloo context, connected like gloo::rendezvous::Context, whose
// unbound buffers (ours and the ones Gloo's algorithms create inside
// gloo::allreduce, gloo::barrier, ...) wait for the group's failure teardown
// before they are destroyed. Included by process_group_gloo*.cpp only.
//
// § Note [Gloo teardown across worker threads]
// Up to Options::threads collectives are inside Gloo at once (Note [Collective
// order]). When one of them fails, Gloo itself reaches into the others'
// buffers: a timed-out waitRecv/waitSend signals every pair of the context
// (Pair::signalException, under the pair's mutex, sets the error on every
// unbound buffer with an operation pending on that pair and wakes it), and so
// does the device loop when a peer's socket dies. The thread that owns a
// signalled buffer wakes at once and unwinds — destroying, inside
// gloo::allreduce, the scratch buffer Gloo allocated there — while the
// signalling thread may still be walking the next pair, where the same buffer
// has another operation pending. Gloo keeps the object alive by a reference
// count (its destructor spins until the signaller lets go), but that count
// lives in libgloo, which is not built with ThreadSanitizer, so nothing orders
// the two threads' accesses as far as TSan, or the C++ memory model (the spin
// is a relaxed load), can tell. It was seen as a race between
// UnboundBuffer::signalException on one worker and ~UnboundBuffer on another
// (tools/sanitizers/README.md).
//
// The fix serialises a failed group's teardown across its threads, without
// touching the normal path:
// - GuardedContext puts a forwarding transport context in front of Gloo's TCP
//   context, so every unbound buffer created for this group (by us or inside a
//   Gloo algorithm) is a GuardedBuffer around Gloo's own.
// - A GuardedBuffer destroyed while an exception unwinds its thread (a failed
//   collective: the exception is leaving Gloo's frames, or ours) first runs the
//   group's teardown, and only then lets Gloo destroy the real buffer. Destroyed
//   normally, it does nothing extra: no lock, no wait.
// - The teardown signals every pair through Gloo's own timeout path (a zero-
//   timeout wait on a private buffer that is never posted, which makes Gloo's
//   Context::signalException visit every pair under its mutex), once per group,
//   under a mutex that every later caller also takes.
// Why that is enough: a pair signals its pending buffers only once, in the
// critical section that sets its error (later signals see the error and do
// nothing; the device loop stops serving a closed pair), and the loop's reads
// and writes into a buffer also happen under the pair's mutex. The teardown
// locks every pair after that section (or is that section), so everything any
// thread did to any buffer through a pair happens before the teardown ends; a
// thread that destroys a buffer after taking the teardown mutex (and finding it
// done) is ordered after all of it, in a way TSan sees (pthread mutexes).
// gloo_detail::call_gloo runs the same teardown when a Gloo call throws, before
// the caller's options and buffers go (Note [Gloo buffers after a failure]).
// Read before: distributed/process_group/process_group_gloo_pending.h.
// Read next: distributed/process_group/process_group_gloo.cpp.
#pragma once

#include <memory>

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/device.h>

namespace lockstep::distributed::gloo_detail {

class Teardown;

class GuardedContext final : public gloo::rendezvous::Context {
 public:
  GuardedContext(int rank, int size);
  // gloo::rendezvous::Context::connectFullMesh, then puts the guard in front of
  // the transport context. Call once, before any collective.
  void connect(gloo::rendezvous::Store& store, std::shared_ptr<gloo::transport::Device>& device);
  // Signals every pair (once per group; later calls wait for the first one to
  // finish). Afterwards no Gloo thread touches any buffer of this group again.
  // Final: every later Gloo call on this context fails.
  void tear_down() noexcept;

 private:
  std::shared_ptr<Teardown> teardown_;
};

}  // namespace lockstep::distributed::gloo_detail
