// distributed/process_group/work_queue.cpp — a mutex-protected deque drained in enqueue order
// (work_queue.h says why): WorkQueue::loop is the worker thread that runs a rank's collectives
// while backward goes on. A Gloo collective arrives through ProcessGroupGloo::enqueue
// (process_group_gloo.cpp), which numbers each collective in issue order.
// Read before: distributed/process_group/work_queue.h. Read next:
// distributed/process_group/process_group_gloo.h; on README's DDP track, distributed/ddp/bucket.h.
#include "distributed/process_group/work_queue.h"

#include "core/error.h"

namespace lockstep::distributed::detail {

WorkQueue::WorkQueue(int threads, std::function<void()> on_start, std::function<void()> on_exit)
    : on_start_(std::move(on_start)), on_exit_(std::move(on_exit)) {
  LS_CHECK(threads >= 1, "WorkQueue: needs at least one thread, got ", threads);
  LS_CHECK(threads == 1 || (!on_start_ && !on_exit_), "WorkQueue: on_start/on_exit need a single thread");
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkQueue::enqueue(std::shared_ptr<Work> work, Task task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.emplace_back(std::move(work), std::move(task));
  }
  cv_.notify_one();
}

void WorkQueue::run_and_wait(std::function<void()> task) {
  auto work = std::make_shared<Work>("setup");
  enqueue(work, [task = std::move(task)] {
    task();
    return std::vector<Tensor>{};
  });
  work->wait(std::chrono::hours(24 * 365));  // setup has its own timeouts
}

void WorkQueue::loop() {
  std::exception_ptr start_error;  // a failed on_start fails every task
  if (on_start_) {
    try {
      on_start_();
    } catch (...) {
      start_error = std::current_exception();
    }
  }
  for (;;) {
    std::pair<std::shared_ptr<Work>, Task> item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) break;  // stop_ and nothing left to run
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      if (start_error) std::rethrow_exception(start_error);
      item.first->mark_completed(item.second());
    } catch (...) {
      item.first->mark_failed(std::current_exception());
    }
  }
  if (on_exit_ && !start_error) on_exit_();
}

}  // namespace lockstep::distributed::detail
