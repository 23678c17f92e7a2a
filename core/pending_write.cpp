// core/pending_write.cpp — PendingWrite's run-once wait and the per-thread bypass.
// Read before: core/pending_write.h.
#include "core/pending_write.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace lockstep {

namespace {
thread_local int bypass_depth = 0;
// The writes whose `finish` is running on this thread (nested when a finish
// touches a storage that another write is attached to).
thread_local std::vector<const PendingWrite*> finishing;
}  // namespace

PendingWrite::PendingWrite(std::function<void()> finish) : finish_(std::move(finish)) {}

void PendingWrite::wait() {
  if (std::find(finishing.begin(), finishing.end(), this) != finishing.end()) return;  // our own finish
  std::lock_guard<std::mutex> lock(mutex_);
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
