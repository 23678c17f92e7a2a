// distributed/ddp/ddp_progress.cpp — publishing positions from a writer thread and
// reading the others' when a wait failed.
// Read before: distributed/ddp/ddp_progress.h (Note [Progress board]).
#include "distributed/ddp/ddp_progress.h"

#include <atomic>
#include <chrono>
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
                                                                          ' ', p.finished ? 1 : 0, ' ',
                                                                          p.gave_up ? 1 : 0));
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

// Every other rank's last published position ({} where none is).
std::vector<DDPPosition> ProgressBoard::read_all() const {
  std::vector<DDPPosition> all(static_cast<size_t>(world_size_));
  for (int r = 0; r < world_size_; ++r) {
    const std::string key = prefix_ + std::to_string(r);
    if (r == rank_ || !store_->check({key})) continue;
    int64_t finished = 0, gave_up = 0;
    std::istringstream(store_->get_string(key)) >> all[r].backward >> all[r].launched >> all[r].buckets >> finished >>
        gave_up;
    all[r].finished = finished != 0;
    all[r].gave_up = gave_up != 0;
  }
  return all;
}

// § Note [Progress board when no rank is behind]
// A rank stopped (SIGSTOP) or hung just after it published a launch, before its
// communication thread sent the data, stands level with the ranks waiting for
// it. So does a healthy rank waiting for the same collective, but that one
// gives up too when its own wait times out, and says so on the board (gave_up).
// A rank can even stand past this point: its communication thread finished its
// own side of the collective and the rank published a later position, but it was
// stopped before its last send left the socket. A healthy rank past this point
// would have sent that data; if it is waiting on a later collective it gives up
// too. So with no rank behind, the reader waits up to kGiveUpGrace for the level
// and the ahead ranks to give up, then names those that did not; if all did, the
// collective itself failed (the network, say).
std::string ProgressBoard::who_is_behind(const DDPPosition& waiting_at) {
  constexpr auto kGiveUpGrace = std::chrono::milliseconds(1500);
  DDPPosition mine = waiting_at;
  mine.gave_up = true;
  record(mine);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_.empty()) return "Progress board: stopped after a store error (" + broken_ + ").";
  }
  std::ostringstream os;
  int behind = 0;
  std::vector<int> level, ahead, gave_up;
  std::vector<DDPPosition> all;
  try {
    const auto deadline = std::chrono::steady_clock::now() + kGiveUpGrace;
    for (;;) {
      all = read_all();
      os.str("");
      behind = 0;
      level.clear();
      ahead.clear();
      gave_up.clear();
      for (int r = 0; r < world_size_; ++r) {
        if (r == rank_) continue;
        if (all[r].before(waiting_at)) {
          os << (behind++ ? "; " : "") << "rank " << r << " did not arrive: its last position is '" << all[r].str()
             << "'";
        } else if (all[r].gave_up) {
          gave_up.push_back(r);
        } else {
          (waiting_at.before(all[r]) ? ahead : level).push_back(r);
        }
      }
      if (behind > 0 || (level.empty() && ahead.empty()) || std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } catch (const std::exception& e) {
    return lockstep::detail::str("Progress board: could not be read (", e.what(), ").");
  }
  auto list = [](const std::vector<int>& ranks) {
    std::string out = ranks.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
    return out;
  };
  if (behind > 0) {
    return lockstep::detail::str("Progress board: ", os.str(), " (this rank waits at '", waiting_at.str(), "').");
  }
  if (!level.empty()) {
    return lockstep::detail::str("Progress board: no rank is behind; ", list(level), " reached this point too ('",
                                 waiting_at.str(), "') but neither completed the collective nor gave up waiting on "
                                 "it: stopped (SIGSTOP), hung in communication, or cut off from the network.");
  }
  if (!ahead.empty()) {
    std::string positions;
    for (size_t i = 0; i < ahead.size(); ++i) {
      positions += lockstep::detail::str(i ? "; " : "", "rank ", ahead[i], " at '", all[ahead[i]].str(), "'");
    }
    return lockstep::detail::str("Progress board: no rank is behind; ", list(ahead), " got past this point ('",
                                 waiting_at.str(), "': ", positions, ") but ", ahead.size() == 1 ? "its" : "their",
                                 " last data for this collective never arrived and ",
                                 ahead.size() == 1 ? "it has" : "they have",
                                 " not given up waiting since: stopped (SIGSTOP) or hung before the send left, "
                                 "or cut off from the network.");
  }
  if (!gave_up.empty()) {
    return lockstep::detail::str("Progress board: no rank is behind; ", list(gave_up), " reached this point ('",
                                 waiting_at.str(), "') or later and gave up waiting as well: the collective itself failed "
                                 "(a network problem?).");
  }
  return lockstep::detail::str("Progress board: every other rank is past this point ('", waiting_at.str(),
                               "'); the collective itself failed (a network problem?).");
}

}  // namespace lockstep::distributed::detail
