// distributed/ddp/replica_check.h — DDP's periodic check that every rank still holds the
// same parameters: a checksum per parameter, all-gathered every K synced
// iterations and compared on every rank.
//
// § Note [Replica divergence check]
// DDP keeps replicas equal by construction: they start from rank 0's
// parameters, every rank applies the same averaged gradients, and each rank's
// optimizer does the same arithmetic. Nothing in the paper's mechanism notices
// when that stops holding: a rank that ran an iteration inside no_sync() alone,
// a forward through module->forward instead of ddp.forward on one rank (its
// gradients never averaged), a learning rate or weight decay that differs per
// rank, a rank that loaded another checkpoint. Training goes on, with models
// that drift apart, and the job ends much later, if at all, with an unrelated
// error. (PyTorch has the same blind spot; its per-iteration checks look at
// structure, not values — so does Note [DDP iteration fingerprint].)
// So every K-th synced forward (DDPOptions::check_replicas_every, default 50;
// LOCKSTEP_REPLICA_CHECK_EVERY overrides it; 0 turns it off), before the
// module's forward, each rank hashes the bytes of every parameter (64 bits
// each: replicas must be bit-identical, which DDP guarantees: every rank gets
// the same reduced bytes and runs the same update) and all-gathers
// [synced forwards so far, number of parameters, hash 0, hash 1, ...]. Every
// rank compares them and throws the same ls::Error: which ranks agree with
// which, the first parameter (by name) that differs, the iterations between
// which the replicas parted (the last check that passed and this one), and the
// usual causes. Ranks inside join() (ddp_join.h) skip it, since joined ranks
// only mirror the training ranks' collectives.
// Cost: one pass over the parameters (memory bandwidth) and one small
// allgather, every K iterations (measured: docs/results/collective_checks.md).
// The optimizer's step count travels in the same allgather once the loop
// registers its optimizer (Note [Optimizer step check]); without it, a rank
// whose optimizer skipped a step is caught by its different parameters.
//
// § Note [Replica check at checkpoints]
// A checkpoint is where a divergence does lasting harm: rank 0 writes its own
// replica, and a resumed job restarts every rank from it, so a run whose
// replicas parted since the last periodic check would save one rank's view as
// if it were all of them — and the next check might come only after the save,
// or never (a short epoch, K = 0). ddp.check_replicas() runs the same
// comparison at once, whatever K: parameters and, when registered, the
// optimizer's step count, with the same error naming the ranks, the first
// differing parameter and the iterations between which the replicas parted.
// It is a collective (one small allgather and a pass over the parameters), so
// every rank calls it at the same point, as it calls the save itself; inside
// join() it is refused. The built-in programs call it before every checkpoint
// (examples/train_run.h, save_checkpoint), which is refused with that error
// on every rank and the previous checkpoint kept.
// Read before: distributed/ddp/ddp_fingerprint.h. Read next:
// distributed/ddp/optimizer_step_check.h,
// distributed/ddp/distributed_data_parallel.cpp (DDPCore::pre_forward).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "distributed/ddp/optimizer_step_check.h"
#include "distributed/process_group/process_group.h"
#include "nn/module.h"

namespace lockstep::distributed::detail {

// 64-bit hash of a tensor's bytes (CPU, contiguous; others are copied first).
// Equal bytes give equal hashes on every rank; any changed bit changes it.
uint64_t tensor_bytes_hash(const Tensor& t);

// "" when every rank's vector equals rank 0's; otherwise the error text: the
// groups of ranks that agree, the first differing parameter, and the causes.
// all[r] is rank r's [forwards, number of parameters, hashes...].
std::string describe_replica_divergence(const std::vector<std::vector<int64_t>>& all,
                                        const std::vector<std::string>& names, int64_t last_good_forward,
                                        int my_rank);

// The check's exchange itself failed (a peer died, stopped or timed out), as
// opposed to a divergence it found: DDP adds the progress board's note.
class ReplicaExchangeFailed : public Error {
 public:
  using Error::Error;
};

class ReplicaCheck {
 public:
  // every: K (0 = off), after LOCKSTEP_REPLICA_CHECK_EVERY is applied by the caller.
  // before_reading: runs before each check reads the parameters (DDP runs the
  // module's state-dict pre-hooks: Note [Forward pre-hooks], nn/module.h).
  ReplicaCheck(int64_t every, nn::NamedTensors params, std::function<void()> before_reading = nullptr);
  // Called at each synced forward, before the module's forward: counts it, and
  // on every K-th runs the check on `pg` (throws ls::Error on a divergence,
  // ReplicaExchangeFailed when the exchange fails).
  void on_synced_forward(ProcessGroup& pg);
  // Runs the check now, whatever K (Note [Replica check at checkpoints]): a
  // collective, so every rank calls it at the same point of its loop.
  void check_now(ProcessGroup& pg);
  int64_t every() const { return every_; }
  // Note [Optimizer step check]: compared from the next check on.
  void set_step_counter(StepCounter counter) { step_counter_ = std::move(counter); }

 private:
  int64_t every_;
  nn::NamedTensors params_;
  std::function<void()> before_reading_;
  int64_t forwards_ = 0;
  int64_t last_good_ = 0;  // the synced forward of the last check that passed (0: construction)
  StepCounter step_counter_;  // empty: no optimizer registered

  void compare(ProcessGroup& pg);  // one exchange and comparison at forwards_
};

// K from DDPOptions::check_replicas_every, or LOCKSTEP_REPLICA_CHECK_EVERY when
// set (a non-negative integer; anything else is an ls::Error naming it).
int64_t replica_check_every(int64_t option);

}  // namespace lockstep::distributed::detail
