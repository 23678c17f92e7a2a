// distributed/process_group/process_group_gloo_pending.h — internal to the Gloo backend: the
// queued form of one collective (ProcessGroupGloo::Pending) and the helpers the
// collectives share. Included by process_group_gloo.cpp and
// process_group_gloo_collectives.cpp only.
// Read before: distributed/process_group/process_group_gloo.h.
// Read next: distributed/process_group/process_group_gloo_teardown.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gloo/common/error.h>
#include <gloo/context.h>

#include "distributed/process_group/collective_check.h"
#include "distributed/process_group/process_group_gloo.h"
#include "distributed/process_group/process_group_gloo_teardown.h"

namespace lockstep::distributed {

struct ProcessGroupGloo::Pending {
  detail::Fingerprint fingerprint;
  // Its fingerprint is compared across ranks before its data moves (Note [Fingerprints
  // exchanged in batches over Gloo]).
  bool checked = false;
  std::string description;
  std::chrono::milliseconds timeout;
  std::function<std::vector<Tensor>(uint32_t tag, std::chrono::milliseconds timeout)> body;
  bool on_shm = false;  // runs on the shared-memory worker (Note [Shared memory on one host])
};

namespace gloo_detail {

// Gloo sizes segments in whole elements of sizeof(E); hand it an unsigned type of
// the tensor's element size (the reduce function knows the real dtype).
template <class F>
inline void with_element_type(size_t element_size, F&& fn) {
  switch (element_size) {
    case 1: return fn.template operator()<uint8_t>();
    case 2: return fn.template operator()<uint16_t>();
    case 4: return fn.template operator()<uint32_t>();
    case 8: return fn.template operator()<uint64_t>();
    default: throw Error(lockstep::detail::str("ProcessGroupGloo: unsupported element size ", element_size));
  }
}
// § Note [Gloo buffers after a failure]
// A Gloo call hands Gloo raw pointers: the options' UnboundBuffers (with their
// mutex and condition variables) and the bytes they wrap (a tensor's storage,
// a local staging vector). Gloo's pairs keep only weak, non-owning references
// to them, and its device-loop thread may be inside one of them (completing a
// send: handleSendCompletion signals the buffer's condition variable; filling a
// recv) at the moment the waiting worker throws. What Gloo does on a failure:
// a timed-out waitRecv/waitSend signals every pair of the context
// ("Application timeout caused pair closure") and throws; a dead peer makes the
// loop signal that pair's pending operations. Neither waits for the loop to
// let go of the buffers, and a failure on one pair leaves recvs posted on the
// other pairs, which a late peer could still fill. So when a Gloo call throws,
// call_gloo() first tears the group down (GuardedContext::tear_down: every
// pair signalled and closed, each under its lock, so the loop lets go of it;
// see Note [Gloo teardown across worker threads] in
// process_group_gloo_teardown.h, which also covers the buffers Gloo's own
// algorithms free while they unwind) and only then lets the exception unwind
// the caller's frame, which destroys the options and the buffers. The caller
// must therefore declare the options and every buffer they point to *before*
// calling call_gloo(). The teardown is final, which matches what the group
// does anyway: a transport failure marks it broken (every later collective
// fails at once with the first error), see process_group_gloo.h.
// Any exception (Gloo's EnforceNotMet is not a gloo::Exception) is rethrown as
// a gloo::IoException so the caller reports it as a transport failure.
// `context` is the group's context, which the constructor made a GuardedContext.
template <class F>
inline void call_gloo(gloo::Context& context, F&& call) {
  try {
    call();
  } catch (const std::exception& e) {
    const std::string what = e.what();
    static_cast<GuardedContext&>(context).tear_down();  // noexcept; once per group, later callers wait
    throw gloo::IoException(what);
  }
}

constexpr uint8_t kPointToPointSlotPrefix = 0x20;  // beside Gloo's collective prefixes (0x01..0x08)

}  // namespace gloo_detail
}  // namespace lockstep::distributed
