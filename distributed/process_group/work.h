// distributed/process_group/work.h — the handle of an asynchronous collective.
//
// A Work is completed by the backend's thread (mark_completed, or
// mark_failed with the error); the caller polls is_completed() or blocks in
// wait(), which rethrows the backend's error, or throws after `timeout`
// naming the collective. Backends subclass it when waiting needs more (NCCL
// makes the compute stream wait on an event instead of blocking the host).
// Read before: distributed/process_group/process_group.h. Read next:
// distributed/process_group/work_queue.h, distributed/process_group/process_group_gloo.h;
// on README's DDP track, distributed/process_group/work_queue.cpp.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace lockstep::distributed {

class Work {
 public:
  // `description` names the collective in errors, e.g. "allreduce #12 (gloo, 1048576 floats)".
  explicit Work(std::string description = "collective") : description_(std::move(description)) {}
  virtual ~Work() = default;

  bool is_completed() const;
  bool is_success() const;  // completed without error
  std::exception_ptr exception() const;
  // Blocks until completed; rethrows the backend's error; throws ls::Error naming
  // the collective after `timeout` (default 300 s, like the process group's).
  virtual void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(300000));
  // The tensors the collective produced (for allreduce: the reduced tensor).
  const std::vector<Tensor>& result() const { return result_; }
  const std::string& description() const { return description_; }
  // When the backend marked it completed (or failed); the epoch before that.
  std::chrono::steady_clock::time_point completed_at() const;

  // Called by the backend.
  void mark_completed(std::vector<Tensor> result = {});
  void mark_failed(std::exception_ptr error);

 private:
  std::string description_;
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool completed_ = false;
  std::chrono::steady_clock::time_point completed_at_{};
  std::exception_ptr error_;
  std::vector<Tensor> result_;
};

}  // namespace lockstep::distributed
