// distributed/process_group/work.cpp — the handle of an asynchronous collective: a flag, an
// error and a condition variable, completed by the backend's thread.
// Read before: distributed/process_group/work.h. Read next:
// distributed/process_group/process_group_gloo.cpp.
#include "distributed/process_group/work.h"

#include "core/error.h"

namespace lockstep::distributed {

bool Work::is_completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool Work::is_success() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !error_;
}

std::exception_ptr Work::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

std::chrono::steady_clock::time_point Work::completed_at() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_at_;
}

void Work::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!done_cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    throw Error(lockstep::detail::str("Work::wait: ", description_, " did not complete within ",
                            timeout.count(), " ms; a peer rank may be slow, dead, or issuing "
                            "collectives in a different order"));
  }
  if (error_) std::rethrow_exception(error_);
}

void Work::mark_completed(std::vector<Tensor> result) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    result_ = std::move(result);
    completed_ = true;
    completed_at_ = std::chrono::steady_clock::now();
  }
  done_cv_.notify_all();
}

void Work::mark_failed(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::move(error);
    completed_ = true;
    completed_at_ = std::chrono::steady_clock::now();
  }
  done_cv_.notify_all();
}

}  // namespace lockstep::distributed
