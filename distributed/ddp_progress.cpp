// distributed/ddp_progress.cpp — publishing positions from a writer thread and
// reading the others' when a wait failed.
// Read before: distributed/ddp_progress.h (Note [Progress board]).
#include "distributed/ddp_progress.h"

#include <atomic>
#include <sstream>

#include "core/error.h"

namespace lockstep::distributed::detail {

namespace {
std::atomic<int64_t> next_instance{0};
}  // namespace

std::string DDPPosition::str() const {
  if (backward == 0) return "before its first synced backward";
  if (finished) return lockstep::detail::str("finished backward #", backward);
  return lockstep::detail::str("backward #", backward, ", ", launched, " of ", buckets, " buckets launched");
}

ProgressBoard::ProgressBoard(std::shared_ptr<Store> store, int rank, int world_size)
    : store_(std::move(store)),
      rank_(rank),
      world_size_(world_size),
      prefix_(lockstep::detail::str("lockstep/ddp_progress/", next_instance++, "/")),
      writer_([this] { writer_loop(); }) {}

ProgressBoard::~ProgressBoard() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  writer_.join();
}

void ProgressBoard::record(const DDPPosition& position) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    latest_ = position;
    ++version_;
  }
  changed_.notify_all();
}

void ProgressBoard::writer_loop() {
  uint64_t written = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || version_ != written; });
    if (stop_ || !broken_.empty()) return;
    const DDPPosition p = latest_;
    written = version_;
    lock.unlock();
    std::string failure;
    try {
      store_->set(prefix_ + std::to_string(rank_), lockstep::detail::str(p.backward, ' ', p.launched, ' ', p.buckets,
                                                                          ' ', p.finished ? 1 : 0));
    } catch (const std::exception& e) {
      failure = e.what();
    }
    lock.lock();
    if (!failure.empty()) {
      broken_ = failure;
      return;
    }
  }
}

std::string ProgressBoard::who_is_behind(const DDPPosition& waiting_at) const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_.empty()) return "Progress board: stopped after a store error (" + broken_ + ").";
  }
  std::ostringstream os, level;
  int behind = 0, at_level = 0;
  try {
    for (int r = 0; r < world_size_; ++r) {
      if (r == rank_) continue;
      const std::string key = prefix_ + std::to_string(r);
      DDPPosition theirs;
      if (store_->check({key})) {
        int64_t finished = 0;
        std::istringstream(store_->get_string(key)) >> theirs.backward >> theirs.launched >> theirs.buckets >> finished;
        theirs.finished = finished != 0;
      }
      if (theirs.before(waiting_at)) {
        os << (behind++ ? "; " : "") << "rank " << r << " did not arrive: its last position is '" << theirs.str()
           << "'";
      } else if (!waiting_at.before(theirs)) {
        level << (at_level++ ? ", " : "") << r;
      }
    }
  } catch (const std::exception& e) {
    return lockstep::detail::str("Progress board: could not be read (", e.what(), ").");
  }
  if (behind > 0) {
    return lockstep::detail::str("Progress board: ", os.str(), " (this rank waits at '", waiting_at.str(), "').");
  }
  // Note [Progress board when no rank is behind]: a rank stopped (SIGSTOP) or
  // hung just after it published a launch, before its communication thread sent
  // the data, stands level with this one. Say so, rather than nothing.
  if (at_level > 0) {
    return lockstep::detail::str("Progress board: no rank is behind; rank", at_level == 1 ? " " : "s ", level.str(),
                                 " reached this point too ('", waiting_at.str(), "') but did not complete the "
                                 "collective: stopped (SIGSTOP), hung in communication, or cut off from the network.");
  }
  return lockstep::detail::str("Progress board: every other rank is past this point ('", waiting_at.str(),
                               "'); the collective itself failed (a network problem?).");
}

}  // namespace lockstep::distributed::detail
