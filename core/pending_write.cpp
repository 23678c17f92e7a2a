// core/pending_write.cpp — PendingWrite's run-once wait and the per-thread bypass, and the
// report of a thread that a write's finish waits for (Note [A thread a pending write waits for]).
// Read before: core/pending_write.h.
#include "core/pending_write.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"

namespace lockstep {

namespace {
thread_local int bypass_depth = 0;
// The writes whose `finish` is running on this thread (nested when a finish
// touches a storage that another write is attached to).
thread_local std::vector<const PendingWrite*> finishing;
}  // namespace

namespace {

// § Note [A thread a pending write waits for]
// A thread that a write's `finish` starts and then waits for (a helper filling
// the storage in parallel) must hold a PendingWriteBypass: otherwise its first
// touch of the storage waits for the finish, which waits for it. That deadlock
// is reported, not silent: a thread kept waiting for a write that another
// thread is finishing prints a warning after 10 s and throws an ls::Error after
// LOCKSTEP_PENDING_WRITE_WAIT_S seconds (default 900, beyond any collective's
// timeout, so a legitimately slow write is never cut short), naming the cause.
// The slow path polls: the normal path (the lock is free) costs nothing more.
void lock_slowly(std::mutex& mutex) {
  using namespace std::chrono;
  seconds limit{900};
  if (const char* env = std::getenv("LOCKSTEP_PENDING_WRITE_WAIT_S"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long long v = std::strtoll(env, &end, 10);
    LS_CHECK(end != env && *end == '\0' && v >= 1, "LOCKSTEP_PENDING_WRITE_WAIT_S='", env,
             "' is not a positive number of seconds; unset it for the default (900)");
    limit = seconds(v);
  }
  const char* cause =
      "another thread is running the write's finish (Note [Pending writes], core/pending_write.h). If that "
      "finish started this thread and waits for it, the two wait for each other: give the thread a "
      "lockstep::PendingWriteBypass before it touches the storage";
  const auto start = steady_clock::now();
  bool warned = false;
  while (!mutex.try_lock()) {
    const auto waited = steady_clock::now() - start;
    if (waited >= limit) {
      throw Error(lockstep::detail::str("pending write: this thread waited ", limit.count(),
                                        " s (LOCKSTEP_PENDING_WRITE_WAIT_S) for a write to a tensor's storage to "
                                        "land: ", cause));
    }
    if (!warned && waited >= seconds(10)) {
      std::fprintf(stderr, "lockstep: warning: this thread has waited 10 s for a pending write to a tensor's "
                           "storage: %s\n", cause);
      warned = true;
    }
    std::this_thread::sleep_for(waited < milliseconds(10) ? microseconds(50) : milliseconds(1));
  }
}

}  // namespace

PendingWrite::PendingWrite(std::function<void()> finish) : finish_(std::move(finish)) {}

void PendingWrite::wait() {
  if (std::find(finishing.begin(), finishing.end(), this) != finishing.end()) return;  // our own finish
  if (!mutex_.try_lock()) lock_slowly(mutex_);
  std::lock_guard<std::mutex> lock(mutex_, std::adopt_lock);
  if (!done_.load(std::memory_order_relaxed)) {
    finishing.push_back(this);
    try {
      finish_();
    } catch (...) {
      error_ = std::current_exception();
    }
    finishing.pop_back();
    finish_ = nullptr;
    done_.store(true, std::memory_order_release);
  }
  if (error_) std::rethrow_exception(error_);
}

PendingWriteBypass::PendingWriteBypass() { ++bypass_depth; }
PendingWriteBypass::~PendingWriteBypass() { --bypass_depth; }
bool PendingWriteBypass::active() { return bypass_depth > 0; }

}  // namespace lockstep
