// distributed/ddp/ddp_progress.h — the progress board: where each rank's DDP is,
// kept in a Store, so that a timed-out collective can name the ranks that did
// not arrive.
//
// § Note [Progress board]
// A collective that times out knows only that some peer did not take part; the
// process group cannot say which (the peers are busy or gone). With
// DDPOptions().progress_store(store) every rank also publishes, under
// "lockstep/ddp_progress/<ddp instance>/<rank>", its position: the number of
// its current synced backward, how many of its buckets it has launched, and
// whether it has finished that backward. The compute thread only updates the
// position in memory; a writer thread sends the latest one to the store
// (coalescing updates that arrive while a write is in flight), so training
// never waits on the store. When a wait fails (the fingerprint exchange, a
// bucket's AllReduce or hook, the unused-parameter bitmap, the bucket rebuild)
// the Reducer reads every rank's position without blocking and appends, e.g.,
//   "Progress board: rank 1 did not arrive: its last position is 'backward #3,
//    2 of 6 buckets launched' (this rank waits at 'backward #3, 4 of 6 buckets
//    launched')."
// A rank is named when its position is before the one this rank waits at:
// for bucket b of backward k, "bucket b+1 launched"; for the backward's
// fingerprint, "backward k started"; for a forward's, "backward k finished".
// When no rank is before it, the ranks level with it that have not given up
// waiting there as well are named instead (one stopped right after publishing a
// launch; Note [Progress board when no rank is behind] in ddp_progress.cpp), so a
// failed wait always gets a board line.
// A rank stalled for a whole timeout has long had its position written, so
// the board is exact where it matters. The instance number counts DDP
// constructions in the process (the same sequence on every rank), so several
// DDPs can share one store. A store error stops the board (training must not
// fail because of it) and the error text says so.
// Read before: distributed/store/store.h, distributed/ddp/reducer.h.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distributed/store/store.h"

namespace lockstep::distributed::detail {

// Where a rank is: ordered by (backward, buckets launched, finished).
struct DDPPosition {
  int64_t backward = 0;  // synced backwards started
  int64_t launched = 0;  // buckets launched in it
  int64_t buckets = 0;   // buckets in all
  bool finished = false;
  bool gave_up = false;  // a wait at this position failed here (not part of the order)
  bool before(const DDPPosition& o) const {
    if (backward != o.backward) return backward < o.backward;
    if (launched != o.launched) return launched < o.launched;
    return !finished && o.finished;
  }
  std::string str() const;
};

class ProgressBoard {
 public:
  ProgressBoard(std::shared_ptr<Store> store, int rank, int world_size);
  ~ProgressBoard();
  ProgressBoard(const ProgressBoard&) = delete;
  ProgressBoard& operator=(const ProgressBoard&) = delete;

  // Non-blocking: the writer thread publishes it.
  void record(const DDPPosition& position);
  // The ranks whose last published position is before `waiting_at`, and where
  // they are; when there is none, the ranks level with it that did not give up
  // waiting there too; never "". Publishes this rank's `waiting_at` as given up.
  std::string who_is_behind(const DDPPosition& waiting_at);

 private:
  void writer_loop();
  std::vector<DDPPosition> read_all() const;

  std::shared_ptr<Store> store_;
  int rank_;
  int world_size_;
  std::string prefix_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  DDPPosition latest_;
  uint64_t version_ = 0;  // of latest_
  bool stop_ = false;
  std::string broken_;  // why the board stopped, if it did
  std::thread writer_;
};

}  // namespace lockstep::distributed::detail
