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
  std::ostringstream os;
  int behind = 0;
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
      if (!theirs.before(waiting_at)) continue;
      os << (behind++ ? "; " : "") << "rank " << r << " did not arrive: its last position is '" << theirs.str() << "'";
    }
  } catch (const std::exception& e) {
    return lockstep::detail::str("Progress board: could not be read (", e.what(), ").");
  }
  if (behind == 0) return "";
  return lockstep::detail::str("Progress board: ", os.str(), " (this rank waits at '", waiting_at.str(), "').");
}

}  // namespace lockstep::distributed::detail
