// core/pending_write.h — a write into a storage that was started
// asynchronously and may still be under way; touching the storage waits for it.
//
// § Note [Pending writes]
// A collective that receives into a tensor (a broadcast of a parameter, say)
// returns at once and fills the memory later, on a communication thread. The
// plain way to use it is to wait before going on; the fast way is to go on and
// wait only when something needs that memory — for ZeroRedundancyOptimizer,
// the next forward, layer by layer (Note [ZeRO broadcasts overlap the next
// forward], distributed/zero/zero_broadcasts.cpp). A PendingWrite attached to
// a StorageImpl makes the second way safe: StorageImpl::data(), through which
// every kernel, copy, print and collective reaches the memory, first runs the
// write's `finish` (wait for the collective; copy received bytes into place)
// when one is attached, then detaches it. So no reader sees the old bytes and
// no writer races the transfer, whatever it is; the cost when nothing is
// attached is one atomic load.
// - `finish` runs once, on the first thread that touches an attached storage;
//   other threads block until it is done. One write may be attached to several
//   storages (each waits for it).
// - The threads that carry out the write (the process groups' worker threads)
//   hold a PendingWriteBypass: they reach the memory without waiting, or they
//   would wait for themselves. A collective issued on a storage with a pending
//   write waits for it on the issuing thread first (collective_check.cpp).
// - If `finish` throws, every later touch of the storage throws the same error
//   (the bytes are unknown) until the owner detaches it.
// - Autograd's version counter: whoever attaches a write bumps the version
//   then, not when it lands (an op may save a tensor for backward before it
//   touches the memory; a bump in between would look like an in-place change).
// Read before: core/storage.h. Read next: core/tensor_impl.h.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <mutex>

namespace lockstep {

class PendingWrite {
 public:
  explicit PendingWrite(std::function<void()> finish);
  PendingWrite(const PendingWrite&) = delete;
  PendingWrite& operator=(const PendingWrite&) = delete;

  // Runs `finish` unless it already ran (then returns, or rethrows its error).
  // Called from inside `finish` on the same thread (it writes the storages it
  // is attached to): returns at once.
  void wait();
  bool done() const { return done_.load(std::memory_order_acquire); }

 private:
  std::mutex mutex_;
  std::function<void()> finish_;  // released once run (it may hold the tensors it writes)
  std::exception_ptr error_;
  std::atomic<bool> done_{false};
};

// RAII: this thread carries out pending writes (a communication worker): it
// touches storages without waiting for their pending writes.
class PendingWriteBypass {
 public:
  PendingWriteBypass();
  ~PendingWriteBypass();
  PendingWriteBypass(const PendingWriteBypass&) = delete;
  PendingWriteBypass& operator=(const PendingWriteBypass&) = delete;
  static bool active();  // on this thread
};

}  // namespace lockstep
