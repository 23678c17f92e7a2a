// distributed/process_group/cuda/process_group_nccl_work.cpp — WorkNCCL (event-finished
// collectives, CPU results staged back), the communicator's abort, and the
// watchdog thread (Note [NCCL watchdog] in process_group_nccl.h).
// Read before: distributed/process_group/cuda/process_group_nccl_work.h.
// Read next: distributed/process_group/cuda/process_group_nccl.cpp.
#include "distributed/process_group/cuda/process_group_nccl_work.h"

#include <nccl.h>

#include <cstring>
#include <thread>

#include "core/cuda/cuda_context.h"
#include "core/error.h"

namespace lockstep::distributed::detail {

// ---- NCCLComm ----

void NCCLComm::abort(const std::string& failure) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_.empty()) failure_ = failure;
    if (destroyed_) return;
  }
  // Once: the first caller aborts, later ones only recorded their failure.
  if (aborted_.exchange(true)) return;
  if (comm != nullptr) {
    // Not under the group's issue lock: NCCL lets another thread abort a
    // communicator that a blocked NCCL call is using (that call then returns an
    // error). handle_mutex_ only keeps the watchdog's error query off a freed handle.
    std::lock_guard<std::mutex> lock(handle_mutex_);
    ncclCommAbort(comm);
  }
}

std::string NCCLComm::async_error() {
  std::lock_guard<std::mutex> lock(handle_mutex_);
  if (aborted_.load() || comm == nullptr) return "";
  {
    std::lock_guard<std::mutex> state(mutex_);
    if (destroyed_) return "";
  }
  ncclResult_t async = ncclSuccess;
  if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) return "";
  if (async == ncclSuccess || async == ncclInProgress) return "";
  return lockstep::detail::str(ncclGetErrorString(async), ": ", ncclGetLastError(comm));
}

std::string NCCLComm::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

void NCCLComm::destroy() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (destroyed_) return;
    destroyed_ = true;
  }
  std::lock_guard<std::mutex> lock(handle_mutex_);
  if (!aborted_.load() && comm != nullptr) ncclCommDestroy(comm);  // nothing useful to do with an error at teardown
  comm = nullptr;
}

// ---- WorkNCCL ----

WorkNCCL::WorkNCCL(std::string description, std::shared_ptr<NCCLComm> comm, std::chrono::milliseconds timeout)
    : Work(std::move(description)), comm_(std::move(comm)), timeout_(timeout) {
  cuda::DeviceGuard guard(Device::cuda(comm_->device));
  LS_CUDA_CHECK(cudaEventCreateWithFlags(&start_, cudaEventDisableTiming));
  LS_CUDA_CHECK(cudaEventCreateWithFlags(&end_, cudaEventDisableTiming));
}

WorkNCCL::~WorkNCCL() {
  // Pinned buffers may still be the target of a copy on the comm stream if the
  // collective never finished (aborted while a peer hung): then they are
  // leaked on purpose rather than freed under the DMA engine.
  bool done = !launched_;
  if (!done) {
    const cudaError_t q = cudaEventQuery(end_);
    done = q == cudaSuccess;
    if (q != cudaSuccess && q != cudaErrorNotReady) cudaGetLastError();  // clear a sticky-free error state
  }
  if (done) {
    for (void* p : pinned_) cudaFreeHost(p);
  }
  // Destroying an event that is still pending is allowed: CUDA releases it when it completes.
  if (start_ != nullptr) cudaEventDestroy(start_);
  if (end_ != nullptr) cudaEventDestroy(end_);
}

void* WorkNCCL::pinned(size_t nbytes) {
  void* p = nullptr;
  LS_CUDA_CHECK(cudaMallocHost(&p, nbytes == 0 ? 1 : nbytes));
  pinned_.push_back(p);
  return p;
}

void WorkNCCL::add_host_output(const Tensor& to, const void* from, size_t nbytes) {
  host_outputs_.push_back({to, from, nbytes});
}

void WorkNCCL::mark_launched() {
  launched_at_ = std::chrono::steady_clock::now();
  launched_ = true;
}

bool WorkNCCL::event_done() const {
  const cudaError_t q = cudaEventQuery(end_);
  if (q == cudaSuccess) return true;
  if (q == cudaErrorNotReady) return false;
  cudaGetLastError();  // reset the non-sticky error before reporting it
  throw Error(lockstep::detail::str("nccl ", description(), ": CUDA reported ", cudaGetErrorName(q), " (",
                                    cudaGetErrorString(q), ") while the collective ran; a kernel before "
                                    "it or the collective itself failed on device ", comm_->device));
}

void WorkNCCL::finish() {
  std::lock_guard<std::mutex> lock(finish_mutex_);
  if (finished_) return;
  finished_ = true;
  for (const HostOutput& out : host_outputs_) std::memcpy(out.to.raw_data(), out.from, out.nbytes);
  alive_.clear();  // the comm stream is done with them (the allocator knows via record_stream)
  mark_completed(result_);
}

void WorkNCCL::fail(const std::string& message) {
  std::lock_guard<std::mutex> lock(finish_mutex_);
  if (finished_) return;
  finished_ = true;
  // alive_ stays: the comm stream may still touch the tensors until the abort lands.
  mark_failed(std::make_exception_ptr(Error(message)));
}

bool WorkNCCL::poll() {
  if (is_completed()) return true;
  try {
    if (!event_done()) return false;
  } catch (const Error& e) {
    comm_->abort(e.what());
    fail(e.what());
    return true;
  }
  finish();
  return true;
}

bool WorkNCCL::expired(std::chrono::steady_clock::time_point now) const {
  return launched_ && now - launched_at_ > timeout_;
}

void WorkNCCL::wait(std::chrono::milliseconds timeout) {
  if (has_host_outputs()) return synchronize(timeout);
  if (auto error = exception()) std::rethrow_exception(error);
  const std::string failure = comm_->failure();
  LS_CHECK(failure.empty(), "nccl ", description(), ": the process group is unusable after an earlier failure: ",
           failure);
  cuda::DeviceGuard guard(Device::cuda(comm_->device));
  // Note [NCCL stream isolation]: the compute stream waits, the host does not.
  LS_CUDA_CHECK(cudaStreamWaitEvent(cuda::current_stream(comm_->device), end_, 0));
}

void WorkNCCL::synchronize(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  cuda::DeviceGuard guard(Device::cuda(comm_->device));
  int spins = 0;
  while (!poll()) {
    const std::string failure = comm_->failure();
    if (!failure.empty()) {
      fail(lockstep::detail::str("nccl ", description(), ": aborted after an earlier failure: ", failure));
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      throw Error(lockstep::detail::str("nccl ", description(), ": WorkNCCL::synchronize: not completed within ",
                                        timeout.count(), " ms; a peer rank may be slow, dead, or issuing "
                                        "collectives in a different order"));
    }
    // Short collectives finish within microseconds: spin a little, then sleep.
    if (++spins < 200) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  Work::wait(std::chrono::milliseconds(0));  // rethrows a failure; completed here
}

// ---- NCCLWatchdog ----

NCCLWatchdog::NCCLWatchdog(std::shared_ptr<NCCLComm> comm, std::chrono::milliseconds interval)
    : comm_(std::move(comm)), interval_(interval) {
  thread_ = std::thread([this] { loop(); });
}

NCCLWatchdog::~NCCLWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void NCCLWatchdog::add(std::shared_ptr<WorkNCCL> work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back(std::move(work));
  }
  cv_.notify_all();
}

void NCCLWatchdog::loop() {
  try {
    cuda::set_device(comm_->device);  // event queries go to the group's device
  } catch (const std::exception& e) {
    comm_->abort(lockstep::detail::str("the NCCL watchdog could not select device ", comm_->device, ": ", e.what()));
  }
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (pending_.empty()) {
      cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      continue;
    }
    lock.unlock();
    check_once();
    lock.lock();
    cv_.wait_for(lock, interval_, [&] { return stop_; });
  }
}

// One pass: async errors, completions, timeouts (Note [NCCL watchdog]).
void NCCLWatchdog::check_once() {
  std::vector<std::shared_ptr<WorkNCCL>> works;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    works = pending_;
  }
  if (const std::string error = comm_->async_error(); !error.empty()) {
    comm_->abort(lockstep::detail::str("NCCL reported an asynchronous error on rank ", comm_->rank, " (device ",
                                       comm_->device, "): ", error,
                                       "; a peer rank may have exited or its network failed"));
  }
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<WorkNCCL>> finished;
  for (const auto& w : works) {
    if (w->poll()) {
      finished.push_back(w);
      continue;
    }
    if (w->expired(now)) {
      const std::string failure = lockstep::detail::str(
          w->description(), " did not complete within ", w->timeout().count(),
          " ms (timeout; the NCCL communicator was aborted: a peer rank may have exited, crashed, or stopped "
          "issuing collectives; raise LOCKSTEP_TIMEOUT_S if it is only slow)");
      comm_->abort(failure);
    }
    const std::string failure = comm_->failure();
    if (!failure.empty()) {
      w->fail(lockstep::detail::str("nccl ", w->description(), " failed: ", failure));
      finished.push_back(w);
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  std::erase_if(pending_, [&](const std::shared_ptr<WorkNCCL>& w) {
    for (const auto& f : finished) {
      if (f == w) return true;
    }
    return false;
  });
}

bool NCCLWatchdog::drain(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (pending_.empty()) return true;
    }
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  comm_->abort(lockstep::detail::str("the process group was destroyed while collectives were still pending after ",
                                     timeout.count(), " ms"));
  check_once();  // fails the rest
  return false;
}

}  // namespace lockstep::distributed::detail
