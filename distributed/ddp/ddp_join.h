// distributed/ddp/ddp_join.h — uneven inputs: DistributedDataParallel::join(fn),
// lockstep's `with model.join():` (PyTorch's Join context manager for DDP).
//
//   ddp.join([&] {
//     for (const auto& batch : loader) {      // ranks may have different numbers of batches
//       opt.zero_grad();
//       ls::cross_entropy(ddp.forward(batch.data), batch.target).backward();
//       opt.step();
//     }
//   }, ls::distributed::JoinOptions().divide_by_initial_world_size(true));
//
// Without join, a rank that runs out of data stops issuing collectives and the
// others hang in their next AllReduce (or fail at the timeout).
//
// § Note [Join: shadowing the collectives]
// Inside join(), every DDP forward first AllReduces a small status vector
// [synced, arms, rebuild, one flag per rank still training] (3 + world int64).
// When fn returns, the rank has "joined": it loops, contributing a zero
// status, and from each round's sums learns what the ranks still training are
// about to do, and issues the same collectives with nothing in them (the
// Reducer's shadow_* in reducer_join.cpp): a JOINED fingerprint, the bucket
// rebuild broadcast, the buffer broadcasts (from the lowest rank still
// training, since rank 0 may have joined), a zero bitmap and zero-filled
// buckets, through the communication hook when one is registered. When a
// round finds no rank training, every rank leaves the loop and the parameters
// and buffers of the last rank to join (the highest of the last to join) are
// broadcast, because joined ranks stopped stepping their optimizer.
// Gradients: the joined ranks add zeros, so the SUM is over the ranks still
// training; with divide_by_initial_world_size(true) (default, like PyTorch) it
// is still divided by the world size — each remaining example keeps the weight
// it had — and with false by the number of ranks still training.
// throw_on_early_termination(true): as soon as one rank has joined, every rank
// throws (the others from their next forward, the joined one from join()).
// Rules: every rank calls join() (with the same options) around the same kind
// of loop; inside it every grad-enabled synced forward is followed by its
// backward (the joined ranks shadow one backward per such forward). Cost: one
// AllReduce of 3 + world int64 per forward inside join().
// Read before: distributed/ddp/distributed_data_parallel.h, distributed/ddp/reducer.h.
// Read next: distributed/ddp/reducer_join.cpp, distributed/ddp/ddp_join.cpp.
#pragma once

#include <memory>
#include <vector>

namespace lockstep::distributed {

class JoinOptions {
 public:
  // Divide the summed gradients by the initial world size even when some ranks
  // have joined (true, PyTorch's default), or by the number still training.
  JoinOptions& divide_by_initial_world_size(bool v) { divide_by_initial_world_size_ = v; return *this; }
  // Throw on every rank as soon as one rank runs out of inputs. Default false.
  JoinOptions& throw_on_early_termination(bool v) { throw_on_early_termination_ = v; return *this; }

  bool divide_by_initial_world_size() const { return divide_by_initial_world_size_; }
  bool throw_on_early_termination() const { return throw_on_early_termination_; }

 private:
  bool divide_by_initial_world_size_ = true;
  bool throw_on_early_termination_ = false;
};

namespace detail {

class DDPCore;

// What every rank learns from one status exchange.
struct JoinRound {
  bool synced = false;   // the training ranks' forward is synced (not under no_sync)
  bool arms = false;     // ... and arms the reducer: its backward reduces buckets
  bool rebuild = false;  // ... and rebuilds the buckets first
  std::vector<int> active;  // ranks still training, ascending
  // Where buffers and the traced bucket order come from: the lowest rank training.
  int source() const { return active.empty() ? 0 : active.front(); }
};

// Lives in DDPCore while join() runs.
class JoinState {
 public:
  JoinState(DDPCore& core, const JoinOptions& options) : core_(core), options_(options) {}
  // A training rank's forward: exchange the status (throws under throw_on_early_termination).
  JoinRound forward_round(bool synced, bool arms, bool rebuild);
  // After fn: shadow the others until all have joined, then sync the final model.
  void shadow_until_all_joined();

 private:
  JoinRound exchange(bool active, bool synced, bool arms, bool rebuild);
  void sync_final_model();

  DDPCore& core_;
  JoinOptions options_;
  std::vector<int> last_active_;  // the training ranks of the last round that had any
};

// RAII for DistributedDataParallel::join: installs the JoinState, removes it
// (and restores the divisor) however fn ends.
class JoinScope {
 public:
  JoinScope(DDPCore& core, const JoinOptions& options);
  ~JoinScope();
  JoinScope(const JoinScope&) = delete;
  JoinScope& operator=(const JoinScope&) = delete;
  void finish();  // fn returned: shadow, then sync the final model

 private:
  DDPCore& core_;
};

}  // namespace detail
}  // namespace lockstep::distributed
