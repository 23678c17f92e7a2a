// distributed/process_group/process_group_gloo_teardown.cpp — the guarded Gloo context: a
// forwarding transport context whose unbound buffers run the group's failure
// teardown before Gloo destroys them while an exception unwinds (Note [Gloo
// teardown across worker threads] in process_group_gloo_teardown.h).
// Read before: distributed/process_group/process_group_gloo_teardown.h.
// Read next: distributed/process_group/process_group_gloo.cpp.
#include "distributed/process_group/process_group_gloo_teardown.h"

#include <chrono>
#include <exception>
#include <mutex>
#include <utility>
#include <vector>

#include <gloo/transport/context.h>
#include <gloo/transport/unbound_buffer.h>

namespace lockstep::distributed::gloo_detail {

// Once per group: signal every pair of Gloo's transport context (see the Note).
class Teardown {
 public:
  explicit Teardown(std::shared_ptr<gloo::transport::Context> transport) : transport_(std::move(transport)) {}

  void run() noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_) return;  // the first teardown finished before we got the mutex
    try {
      // Gloo has no public "signal every pair"; its timeout path is one. A
      // buffer with nothing posted, waited on for 0 ms, times out at once and
      // makes Gloo's Context::signalException visit every pair under its
      // mutex (a pair already in error is left as it is), then throws. The
      // buffer comes from Gloo's own context, not the guarded one, and is
      // never posted, so no pair refers to it.
      auto probe = transport_->createUnboundBuffer(nullptr, 0);
      probe->waitRecv(nullptr, std::chrono::milliseconds(0));
    } catch (...) {
      // The expected "Timed out waiting 0ms": every pair is now in error.
    }
    done_ = true;
  }

 private:
  std::shared_ptr<gloo::transport::Context> transport_;  // Gloo's TCP context: the pairs
  std::mutex mutex_;
  bool done_ = false;
};

namespace {

// Gloo's unbound buffer, behind the group's teardown. Gloo's algorithms use it
// through the transport::UnboundBuffer interface only; the pairs see the inner
// buffer (it posts itself), so every call forwards.
class GuardedBuffer final : public gloo::transport::UnboundBuffer {
 public:
  GuardedBuffer(std::unique_ptr<gloo::transport::UnboundBuffer> inner, std::shared_ptr<Teardown> teardown)
      : gloo::transport::UnboundBuffer(inner->ptr, inner->size),
        inner_(std::move(inner)),
        teardown_(std::move(teardown)),
        unwinding_at_creation_(std::uncaught_exceptions()) {}

  // More exceptions in flight than at creation: this thread is unwinding out of
  // a failed Gloo call (or out of ours). Tear the group down before Gloo frees
  // the real buffer; a buffer going away normally costs nothing extra.
  ~GuardedBuffer() override {
    if (std::uncaught_exceptions() > unwinding_at_creation_) teardown_->run();
    inner_.reset();
  }

  bool waitRecv(int* rank, std::chrono::milliseconds timeout) override { return inner_->waitRecv(rank, timeout); }
  bool waitSend(int* rank, std::chrono::milliseconds timeout) override { return inner_->waitSend(rank, timeout); }
  void abortWaitRecv() override { inner_->abortWaitRecv(); }
  void abortWaitSend() override { inner_->abortWaitSend(); }
  void send(int dst_rank, uint64_t slot, size_t offset, size_t nbytes) override {
    inner_->send(dst_rank, slot, offset, nbytes);
  }
  void recv(int src_rank, uint64_t slot, size_t offset, size_t nbytes) override {
    inner_->recv(src_rank, slot, offset, nbytes);
  }
  void recv(std::vector<int> src_ranks, uint64_t slot, size_t offset, size_t nbytes) override {
    inner_->recv(std::move(src_ranks), slot, offset, nbytes);
  }

 private:
  std::unique_ptr<gloo::transport::UnboundBuffer> inner_;
  std::shared_ptr<Teardown> teardown_;
  int unwinding_at_creation_;
};

// Forwards to Gloo's TCP context (which owns the pairs and the device loop's
// registrations); only createUnboundBuffer differs: it wraps.
class GuardedTransport final : public gloo::transport::Context {
 public:
  GuardedTransport(std::shared_ptr<gloo::transport::Context> inner, std::shared_ptr<Teardown> teardown)
      : gloo::transport::Context(inner->rank, inner->size), inner_(std::move(inner)), teardown_(std::move(teardown)) {
    setTimeout(inner_->getTimeout());
  }

  std::unique_ptr<gloo::transport::Pair>& getPair(int rank) override { return inner_->getPair(rank); }
  std::unique_ptr<gloo::transport::Pair>& createPair(int rank) override { return inner_->createPair(rank); }
  std::unique_ptr<gloo::transport::UnboundBuffer> createUnboundBuffer(void* ptr, size_t size) override {
    return std::make_unique<GuardedBuffer>(inner_->createUnboundBuffer(ptr, size), teardown_);
  }

 private:
  std::shared_ptr<gloo::transport::Context> inner_;
  std::shared_ptr<Teardown> teardown_;
};

}  // namespace

GuardedContext::GuardedContext(int rank, int size) : gloo::rendezvous::Context(rank, size) {}

void GuardedContext::connect(gloo::rendezvous::Store& store, std::shared_ptr<gloo::transport::Device>& device) {
  connectFullMesh(store, device);
  // gloo::Context::createUnboundBuffer and getPair go through transportContext_.
  std::shared_ptr<gloo::transport::Context> inner = transportContext_;
  teardown_ = std::make_shared<Teardown>(inner);
  transportContext_ = std::make_shared<GuardedTransport>(std::move(inner), teardown_);
}

void GuardedContext::tear_down() noexcept {
  if (teardown_) teardown_->run();
}

}  // namespace lockstep::distributed::gloo_detail
