// distributed/process_group/work_queue.h — the ordered worker thread behind the Gloo and MPI
// process groups.
//
// The caller's thread enqueues (Work, task) and returns at once; worker threads
// take the tasks strictly in enqueue order — the order every rank issued its
// collectives in, which is what keeps ranks matched (see Note [Collective
// order] in process_group_gloo.h). With one thread a task starts after the
// previous one finished; with T threads up to T tasks run at once, still
// started in order (Gloo keeps them apart by tag). A task returns the tensors
// its Work reports as result(); an exception escaping a task fails that Work.
// Read before: distributed/process_group/work.h. Read next:
// distributed/process_group/work_queue.cpp, distributed/process_group/process_group_gloo.h.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "distributed/process_group/work.h"

namespace lockstep::distributed::detail {

class WorkQueue {
 public:
  using Task = std::function<std::vector<Tensor>()>;

  // With one thread, `on_start` runs first on it (MPI initializes there; if it
  // throws, every task fails with its error) and `on_exit` last.
  explicit WorkQueue(int threads = 1, std::function<void()> on_start = {},
                     std::function<void()> on_exit = {});
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
  std::vector<std::thread> threads_;
};

}  // namespace lockstep::distributed::detail
