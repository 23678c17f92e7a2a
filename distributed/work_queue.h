// distributed/work_queue.h — the ordered worker thread behind the Gloo and MPI
// process groups.
//
// The caller's thread enqueues (Work, task) and returns at once; one worker
// thread runs the tasks strictly in enqueue order — the order every rank
// issued its collectives in, which is what keeps ranks matched (see Note
// [Collective order] in process_group_gloo.h). A task returns the tensors
// its Work reports as result(); an exception escaping a task fails that Work.
// Read before: distributed/work.h. Read next: distributed/process_group_gloo.h.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "distributed/work.h"

namespace lockstep::distributed::detail {

class WorkQueue {
 public:
  using Task = std::function<std::vector<Tensor>()>;

  // `on_start` runs first on the worker thread (MPI initializes there; if it
  // throws, every task fails with its error), `on_exit` last.
  explicit WorkQueue(std::function<void()> on_start = {}, std::function<void()> on_exit = {});
  ~WorkQueue();  // runs what is queued, then joins the worker
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void enqueue(std::shared_ptr<Work> work, Task task);
  // Runs `task` on the worker after everything queued, and waits for it (setup, teardown).
  void run_and_wait(std::function<void()> task);

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<Work>, Task>> queue_;
  bool stop_ = false;
  std::function<void()> on_start_, on_exit_;
  std::thread thread_;
};

}  // namespace lockstep::distributed::detail
