// distributed/process_group/cuda/process_group_nccl_work.h — the NCCL backend's Work (a
// collective queued on the comm stream, finished by an event), the shared
// communicator state, and the watchdog thread that completes, times out and
// aborts (Note [NCCL watchdog] in process_group_nccl.h). Compiled only with
// the CUDA backend; it does not include nccl.h (a private dependency of
// lockstep_distributed), so tests may include it.
// Read before: distributed/process_group/cuda/process_group_nccl.h,
// distributed/process_group/work.h.
// Read next: distributed/process_group/cuda/process_group_nccl.cpp.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "distributed/process_group/work.h"

struct ncclComm;  // nccl.h: typedef struct ncclComm* ncclComm_t

namespace lockstep::distributed::detail {

// The communicator and whether it still works, shared by the group, its Works
// and the watchdog.
struct NCCLComm {
  ncclComm* comm = nullptr;
  int device = 0;
  int rank = 0;
  int size = 1;

  // Records `failure` (the first one wins), then aborts the communicator once
  // (ncclCommAbort). Safe from any thread.
  void abort(const std::string& failure);
  // Empty while usable, else the first failure.
  std::string failure() const;
  bool aborted() const { return aborted_.load(); }
  // At the group's end: ncclCommDestroy unless aborted.
  void destroy();
  // The communicator's asynchronous error (ncclCommGetAsyncError) as text, or
  // "" while there is none (or once it is aborted or destroyed).
  std::string async_error();

 private:
  mutable std::mutex mutex_;
  std::mutex handle_mutex_;  // ncclCommAbort / ncclCommDestroy vs. ncclCommGetAsyncError
  std::string failure_;
  std::atomic<bool> aborted_{false};
  bool destroyed_ = false;
};

class WorkNCCL : public Work {
 public:
  WorkNCCL(std::string description, std::shared_ptr<NCCLComm> comm, std::chrono::milliseconds timeout);
  ~WorkNCCL() override;
  WorkNCCL(const WorkNCCL&) = delete;
  WorkNCCL& operator=(const WorkNCCL&) = delete;

  // Device tensors only: the current compute stream waits on the end event, the
  // host returns at once (Note [NCCL stream isolation]). With CPU tensors
  // (Note [NCCL host tensors]): synchronize(timeout). Rethrows a failure.
  void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(300000)) override;
  // Blocks the host until the collective is done and its CPU results are in
  // place; throws after `timeout`, or the collective's failure.
  void synchronize(std::chrono::milliseconds timeout = std::chrono::milliseconds(300000));
  bool has_host_outputs() const { return !host_outputs_.empty(); }

  // ---- used while launching (ProcessGroupNCCL) ----
  cudaEvent_t start_event() const { return start_; }
  cudaEvent_t end_event() const { return end_; }
  // A pinned host buffer owned by this Work (freed with it once the end event has completed).
  void* pinned(size_t nbytes);
  // At completion, copy `nbytes` from pinned `from` into the CPU tensor `to`.
  void add_host_output(const Tensor& to, const void* from, size_t nbytes);
  void keep_alive(const Tensor& t) { alive_.push_back(t); }
  void set_result(std::vector<Tensor> result) { result_ = std::move(result); }
  // The end event is recorded: the watchdog's clock starts.
  void mark_launched();

  // ---- used by the watchdog ----
  // Completes the Work if the end event has; returns true when it is finished
  // (completed or failed). A CUDA error from the event fails it.
  bool poll();
  bool expired(std::chrono::steady_clock::time_point now) const;
  std::chrono::milliseconds timeout() const { return timeout_; }
  // Fails the Work (if not finished) with ls::Error(message).
  void fail(const std::string& message);

 private:
  bool event_done() const;  // cudaEventQuery(end) == cudaSuccess; throws on a CUDA error
  void finish();            // copy CPU results back, release tensors, mark completed (once)

  std::shared_ptr<NCCLComm> comm_;
  std::chrono::milliseconds timeout_;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t end_ = nullptr;
  std::chrono::steady_clock::time_point launched_at_;
  bool launched_ = false;
  std::mutex finish_mutex_;
  bool finished_ = false;
  std::vector<void*> pinned_;
  struct HostOutput {
    Tensor to;
    const void* from;
    size_t nbytes;
  };
  std::vector<HostOutput> host_outputs_;
  std::vector<Tensor> alive_;
  std::vector<Tensor> result_;
};

// Note [NCCL watchdog]: one thread per group.
class NCCLWatchdog {
 public:
  NCCLWatchdog(std::shared_ptr<NCCLComm> comm, std::chrono::milliseconds interval);
  ~NCCLWatchdog();  // stops the thread (call drain first to let work finish)
  void add(std::shared_ptr<WorkNCCL> work);
  // Waits up to `timeout` for every pending Work to finish; aborts the
  // communicator (failing the rest) if they do not. Returns true if all finished.
  bool drain(std::chrono::milliseconds timeout);

 private:
  void loop();
  void check_once();

  std::shared_ptr<NCCLComm> comm_;
  std::chrono::milliseconds interval_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<WorkNCCL>> pending_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace lockstep::distributed::detail
