// distributed/zero/zero_redundancy_optimizer.h — ZeroRedundancyOptimizer:
// optimizer state sharded across the ranks of a data-parallel group (ZeRO
// stage 1; torch.distributed.optim.ZeroRedundancyOptimizer).
//
//   ls::distributed::ZeroRedundancyOptimizer<ls::optim::AdamW> opt(model->parameters(), pg,
//                                                                  ls::optim::AdamWOptions(1e-3));
//   loss.backward();   // DDP: every rank holds every averaged gradient
//   opt.step();        // each rank steps its shard, then the shards are broadcast
//   ddp.forward(x);    // each layer waits for its parameters' broadcasts first
//
// With plain DDP every rank keeps the whole optimizer state (AdamW: two
// fp32 moments per parameter, 8 bytes per element). Here each rank owns a
// partition of the parameters (Note [ZeRO partition], zero_partition.h) and
// builds an inner optimizer — SGD, Adam or AdamW, from the options given —
// over its own parameters only, so it keeps ~1/N of the state. step() steps
// the inner optimizer, then every owner broadcasts its updated parameters
// (large ones in place, small ones packed; one above split_parameters_mb
// is split, every rank stepping and sending a slice: Note [ZeRO split
// parameters], zero_partition.h), so after step() every
// rank holds bitwise the same parameters, equal to plain DDP + the same
// optimizer (each parameter's update is the same arithmetic on the same
// averaged gradient, done once by its owner instead of N times). Given the
// model (register_forward_waits(model); hook_with_zero_step does it), step()
// does not wait for the broadcasts: each layer's forward pre-hook waits for
// its own parameters', so they travel under the next forward (Note [ZeRO
// broadcasts overlap the next forward], zero_forward_waits.cpp; Note [Forward
// pre-hooks], nn/module.h).
//
// Overlap with DDP (ZeroOptions().overlap_with_ddp(true), then
// hook_with_zero_step(ddp, opt)): each bucket's owned parameters are stepped
// as soon as DDP has reduced that bucket and their broadcasts start at once,
// while the later buckets' reductions are still in flight; opt.step() then
// only hands the broadcasts to the parameters (Note [ZeRO parameter broadcasts] in
// zero_broadcasts.cpp: large parameters in place, in pieces, small ones packed). Why it is exact: Note [ZeRO overlap with
// DDP] in zero_overlap.cpp. On a Gloo group the broadcasts then go on a
// second group of their own, and each bucket is handed over piece by piece as
// it is reduced (Note [ZeRO broadcast group] in zero_broadcasts.cpp, Note
// [Handing a bucket over in pieces] in distributed/zero/bucket_handover_pieces.cpp).
//
// ZeRO-2 (ZeroOptions().overlap_with_ddp(true).shard_gradients(true)): on top
// of that, DDP reduces each gradient only to its owner and the other ranks
// drop it, so a rank holds 1/N of the gradients as well (Note [ZeRO-2
// buckets]); comm hooks, deterministic mode and gradient_as_bucket_view are
// refused with it.
//
// Learning-rate schedulers work unchanged (set_lr reaches the inner
// optimizer); clip_grad_norm_ here clips with the global norm over all
// gradients (every rank has all of them after DDP's AllReduce, so it is the
// same number plain DDP computes); state dicts: Note [ZeRO state dicts] in
// zero_state_dict.cpp.
// Read before: optim/optimizer.h, distributed/ddp/distributed_data_parallel.h.
// Read next: distributed/zero/zero_partition.h, distributed/zero/zero_redundancy_optimizer.cpp.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "distributed/process_group/process_group.h"
#include "distributed/zero/zero_partition.h"
#include "nn/module.h"
#include "optim/adam.h"
#include "optim/sgd.h"

namespace lockstep::distributed {

class ZeroOptions {
 public:
  // Step each bucket's shard from DDP's Reducer right after the bucket is
  // reduced (needs hook_with_zero_step(ddp, opt)). Default false.
  ZeroOptions& overlap_with_ddp(bool v) { overlap_with_ddp_ = v; return *this; }
  bool overlap_with_ddp() const { return overlap_with_ddp_; }
  // ZeRO stage 2: each gradient is reduced only to the rank that owns its
  // parameter, the other ranks drop it, and DDP's buckets live only during
  // backward (Note [ZeRO-2 buckets], distributed/zero/zero_sharded_gradients.cpp).
  // Needs overlap_with_ddp(true). Default false (stage 1).
  ZeroOptions& shard_gradients(bool v) { shard_gradients_ = v; return *this; }
  bool shard_gradients() const { return shard_gradients_; }
  // Large parameters are stepped and broadcast in pieces of this many MB, each
  // sent as soon as it is updated (Note [ZeRO pipelined broadcasts]). 0: whole.
  // Default 4.
  ZeroOptions& broadcast_piece_mb(double v) { broadcast_piece_mb_ = v; return *this; }
  double broadcast_piece_mb() const { return broadcast_piece_mb_; }
  // A contiguous parameter of more than this many MB is split across all the
  // ranks, each stepping and broadcasting a slice of its elements (Note [ZeRO
  // split parameters], zero_partition.h; under ZeRO-2 its gradient is
  // AllReduced, kept whole on every rank). 0: every parameter whole. Unset
  // (the default): kAutoSplitMB with overlap_with_ddp, 0 without; the
  // optimizer's split_parameters_mb() says what it resolved to. Splitting
  // BERT-base's word embeddings and MLM decoder shortened the optimizer's time
  // after the last reduction (docs/results/zero.md): each rank steps and sends
  // half, side by side.
  static constexpr double kAutoSplitMB = 32.0;
  ZeroOptions& split_parameters_mb(double v) { split_parameters_mb_ = v; return *this; }
  std::optional<double> split_parameters_mb() const { return split_parameters_mb_; }
  // The group the updated parameters are broadcast on: the same ranks as the
  // optimizer's group, with connections and worker threads of its own, so that
  // the broadcasts do not queue behind DDP's reductions (Note [ZeRO broadcast
  // group], zero_broadcasts.cpp). Null (the default): with overlap_with_ddp on
  // a Gloo group of 2+ ranks, the constructor makes one from the group's store
  // (unless own_broadcast_group(false)); otherwise the optimizer's group.
  ZeroOptions& broadcast_group(std::shared_ptr<ProcessGroup> pg) { broadcast_group_ = std::move(pg); return *this; }
  const std::shared_ptr<ProcessGroup>& broadcast_group() const { return broadcast_group_; }
  // false: never make a broadcast group; broadcast on the optimizer's group
  // unless broadcast_group() is given. Default true.
  ZeroOptions& own_broadcast_group(bool v) { own_broadcast_group_ = v; return *this; }
  bool own_broadcast_group() const { return own_broadcast_group_; }
  // With overlap: DDP reduces in pieces of broadcast_piece_mb() and hands each
  // bucket over before its reduction is done, the owner stepping (and
  // sending) each piece as soon as it is reduced (Note [Handing a bucket over
  // in pieces], distributed/zero/bucket_handover_pieces.cpp). Unset (the default): on
  // when the broadcasts have a group of their own (given or made), off on the
  // shared group, where the pieces' broadcasts queue behind the reductions and
  // it measured slower (docs/results/zero.md). The optimizer's
  // hands_over_in_pieces() says what it resolved to.
  ZeroOptions& hand_over_in_pieces(bool v) { hand_over_in_pieces_ = v; return *this; }
  std::optional<bool> hand_over_in_pieces() const { return hand_over_in_pieces_; }
  // step() returns once the broadcasts of the updated parameters are started;
  // the layers of the model given to register_forward_waits wait for their
  // own parameters' in their forward pre-hooks — the next forward, layer by
  // layer (Note [ZeRO broadcasts overlap the next forward],
  // zero_forward_waits.cpp). false, or no model given: step() waits for all of
  // them. Default true.
  ZeroOptions& defer_broadcast_waits(bool v) { defer_broadcast_waits_ = v; return *this; }
  bool defer_broadcast_waits() const { return defer_broadcast_waits_; }

 private:
  bool overlap_with_ddp_ = false;
  bool shard_gradients_ = false;
  double broadcast_piece_mb_ = 4.0;
  std::optional<double> split_parameters_mb_;  // unset: kAutoSplitMB with overlap, else 0
  std::shared_ptr<ProcessGroup> broadcast_group_;
  bool own_broadcast_group_ = true;
  std::optional<bool> hand_over_in_pieces_;  // unset: with a broadcast group of its own
  bool defer_broadcast_waits_ = true;
};

// Builds the inner (local) optimizer over one rank's parameters.
using InnerOptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

// Everything of the sharded optimizer but the inner optimizer's type
// (ZeroRedundancyOptimizer<Inner> below is what programs declare; functions
// that take any of them, like hook_with_zero_step, take this).
class ZeroRedundancyOptimizerBase : public optim::Optimizer {
 public:
  // Collective (checks that every rank passed the same parameter shapes).
  ZeroRedundancyOptimizerBase(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> process_group,
                              InnerOptimizerFactory make_inner, const ZeroOptions& options = ZeroOptions());
  ~ZeroRedundancyOptimizerBase() override;

  // Without overlap: steps this rank's shard, then broadcasts every shard.
  // With overlap: the shards were stepped during backward. Then the
  // broadcasts are left to the forward pre-hooks of the parameters' layers
  // (register_forward_waits, ZeroOptions().defer_broadcast_waits), or waited
  // for. Collective.
  void step() override;

  // Note [ZeRO broadcasts overlap the next forward] (zero_forward_waits.cpp).
  // Registers, on every layer of `model` that owns parameters of this
  // optimizer and runs forward pre-hooks (Note [Forward pre-hooks],
  // nn/module.h), a forward pre-hook that waits for the broadcasts of that
  // layer's parameters, and a state-dict pre-hook (state_dict(),
  // load_state_dict(), to(), DDP's replica check) that waits for them all.
  // From the next step() on, those parameters' broadcasts are waited for
  // there; the others' (a layer of the user's own that reads a parameter it
  // registered) in step(). hook_with_zero_step(ddp, opt) calls it with the
  // DDP module. `model` must be held by a std::shared_ptr; the hooks are
  // removed when this optimizer is destroyed.
  void register_forward_waits(nn::Module& model);
  // Waits for every broadcast of the last step() (and sends of its packed
  // parameters); throws the first failure. Call it before reading a
  // parameter outside its layer's forward by other means than the module's
  // state_dict() (printing it, comparing it, a collective on it).
  void wait_for_broadcasts();
  // Whether parameter i's broadcast of the last step() is not yet waited for
  // (or failed: then every wait throws its error).
  bool broadcast_pending(size_t i) const;
  double lr() const override { return inner_->lr(); }
  void set_lr(double lr) override { inner_->set_lr(lr); }

  // Global-norm clipping over every gradient (Note [ZeRO clip_grad_norm_] in
  // zero_redundancy_optimizer.cpp). Refused with overlap (the steps already ran).
  double clip_grad_norm_(double max_norm, double norm_type = 2.0);

  // Note [ZeRO state dicts] (zero_state_dict.cpp).
  // Collective: gathers every shard's state on rank `to`.
  void consolidate_state_dict(int to = 0);
  // On rank `to` after consolidate_state_dict(to): the whole state, in the
  // plain optimizer's format (loadable by a plain SGD/Adam/AdamW too).
  optim::OptimizerState state_dict() const override;
  // This rank's shard, with its place in the partition ("zero.*" keys). Local.
  optim::OptimizerState sharded_state_dict() const;
  // A whole state dict (consolidated, or a plain optimizer's), or this rank's
  // own shard from a run of the same world size. Local: every rank calls it.
  void load_state_dict(const optim::OptimizerState& state) override;
  // Every shard of a run at any world size (all of its ranks, any order).
  void load_sharded_state_dicts(const std::vector<optim::OptimizerState>& shards);

  const ZeroOptions& zero_options() const { return options_; }
  // Where the updated parameters are broadcast (Note [ZeRO broadcast group]):
  // options' broadcast_group, one this optimizer made, or process_group().
  ProcessGroup& broadcast_group() const { return *broadcaster_; }
  bool has_own_broadcast_group() const { return broadcaster_ != process_group_; }
  // Whether hook_with_zero_step has DDP hand buckets over in pieces (Note
  // [Handing a bucket over in pieces]): ZeroOptions' choice, or by default
  // has_own_broadcast_group().
  bool hands_over_in_pieces() const {
    return options_.overlap_with_ddp() && options_.hand_over_in_pieces().value_or(has_own_broadcast_group());
  }
  // Parameters above this many MB are split (Note [ZeRO split parameters]):
  // ZeroOptions' choice, or by default kAutoSplitMB with the overlap, 0 without.
  double split_parameters_mb() const {
    return options_.split_parameters_mb().value_or(options_.overlap_with_ddp() ? ZeroOptions::kAutoSplitMB : 0.0);
  }
  const ZeroPartition& partition() const { return partition_; }
  // The rank that steps parameter i, or kEveryRank when it is split (Note
  // [ZeRO split parameters]: each rank steps partition().range(i, rank)).
  int owner(size_t i) const { return partition_.owner.at(i); }
  // The inner optimizer over this rank's shard (a placeholder parameter when
  // the shard is empty: it never has a gradient). Per-parameter step counts
  // live there (local indices: partition().owned[rank]); the base class's
  // step_count(i) is always 0 here.
  const optim::Optimizer& local_optimizer() const { return *inner_; }
  ProcessGroup& process_group() const { return *process_group_; }

  // Blocks until elements [0, end) of parameter i's gradient are reduced and
  // in .grad; returns when the collectives that brought them had completed.
  using GradientWait = std::function<std::chrono::steady_clock::time_point(size_t i, int64_t end)>;
  // Called by the Reducer when it hands a bucket over (zero_overlap.cpp);
  // `params` are indices into this optimizer's parameter list, whose
  // gradients may still be arriving: `wait` before reading one (Note
  // [Handing a bucket over in pieces]).
  void step_reduced_bucket(size_t bucket_index, const std::vector<size_t>& params, const GradientWait& wait);
  // With overlap: when the last bucket of the latest backward had been
  // reduced (its last collective completed; what remains after it is the
  // rest of that bucket's step and the broadcast wait: bench_ddp's opt_tail_ms).
  std::chrono::steady_clock::time_point last_bucket_reduced_at() const { return last_bucket_reduced_at_; }
  // When that bucket's step was done and its broadcasts started, or its
  // reduction, whichever was later (the optimizer's own work after the last
  // reduction; the rest is the wait).
  std::chrono::steady_clock::time_point last_bucket_stepped_at() const { return last_bucket_stepped_at_; }
  // Records that hook_with_zero_step attached this optimizer to a DDP module.
  void mark_attached(const std::string& what);

 protected:
  std::vector<std::pair<std::string, double>> hyperparameters() const override;
  void set_hyperparameters(const std::map<std::string, double>& values) override;
  std::vector<std::string> buffer_names() const override { return {}; }

 private:
  // One broadcast from `root`: one parameter in place, or several small ones
  // packed (one dtype and device; Note [ZeRO parameter broadcasts]).
  struct ParamBroadcast {
    std::shared_ptr<Work> work;
    Tensor flat;  // the packed tensor, or the parameter itself (in_place)
    std::vector<size_t> params;
    int root = 0;
    bool in_place = false;
  };
  void check_same_parameters_on_all_ranks();
  // Steps this rank's parameters among `params` and starts the broadcasts of
  // all of them, owner by owner (Note [ZeRO pipelined broadcasts], zero_broadcasts.cpp).
  // `wait`: null when every gradient is there (step() without overlap).
  void step_and_broadcast(const std::vector<size_t>& params, const GradientWait& wait = nullptr);
  ProcessGroup& broadcaster() const { return *broadcaster_; }  // Note [ZeRO broadcast group]
  // The broadcast group when none is given (zero_broadcasts.cpp). Collective.
  std::shared_ptr<ProcessGroup> make_broadcast_group() const;
  // Starts the broadcast of pieces [from, to) of root's range of parameter i
  // (the whole parameter, or root's slice of a split one).
  void broadcast_pieces(size_t i, int root, int64_t from, int64_t to);
  int64_t piece_numel(size_t i, int root) const;  // of root's range of i (its length when sent whole)
  int64_t pieces_of(size_t i, int root) const;
  bool sent_in_place(size_t i) const;   // large and contiguous: not packed
  // Points this rank's slice views of the split parameters among `params` at
  // the slices of their gradients (undefined without one), or, with
  // `clear`, drops them again (Note [ZeRO split parameters]).
  void attach_slice_grads(const std::vector<size_t>& params, bool clear);
  // Waits for every broadcast started (pending_), deferred (deferred_) or
  // sent packed (sent_).
  void finish_broadcasts();
  // The end of step(): hands pending_ to the parameters' layers' forward
  // pre-hooks (deferred_) or waits for it (Note [ZeRO broadcasts overlap the next forward]).
  void end_step_broadcasts();
  // Moves pending_ into deferred_, bumping the receivers' versions.
  void defer_pending();
  // Waits for parameter i's deferred broadcasts and copies its packed values
  // in; a failure is kept and rethrown at every later call. The caller holds deferred_mutex_.
  void land(size_t i);
  // Every parameter (but those a forward pre-hook waits for); the first failure
  // is rethrown after all are waited for.
  void land_all(bool except_forward_waited = false);
  // Ends parameter i's write-in-flight mark (Note [Reads of a tensor still
  // being written], autograd/write_in_flight.h). The caller holds deferred_mutex_.
  void unmark_received(size_t i) noexcept;
  void remove_forward_waits() noexcept;  // the hooks register_forward_waits added
  std::string where() const;  // "ZeroRedundancyOptimizer (rank r)"
  // Note [ZeRO destructor reports] (zero_redundancy_optimizer.cpp).
  void report_destructor_failure(const std::string& failure) const noexcept;

  std::shared_ptr<ProcessGroup> process_group_;
  std::shared_ptr<ProcessGroup> broadcaster_;  // Note [ZeRO broadcast group]
  ZeroOptions options_;
  ZeroPartition partition_;
  std::vector<size_t> local_index_;  // per parameter: its index in inner_, or npos
  std::vector<Tensor> slices_;       // per parameter: this rank's slice view of a split one
  std::unique_ptr<optim::Optimizer> inner_;
  bool placeholder_ = false;  // inner_ holds a placeholder (empty shard)
  std::vector<ParamBroadcast> pending_;  // started, not yet deferred or waited for
  std::vector<ParamBroadcast> sent_;     // after step(): this rank's packed sends, not deferred

  // Note [ZeRO broadcasts overlap the next forward] (zero_forward_waits.cpp).
  struct Landing {  // one broadcast that writes (or, on its owner, reads) a parameter
    std::shared_ptr<Work> work;
    int root = 0;
    Tensor flat;  // packed: the received values; in place: undefined
    int64_t offset = 0;
    Tensor param;  // packed: where its values go
  };
  struct Deferred {  // per parameter
    std::vector<Landing> landings;  // not yet waited for
    std::exception_ptr error;       // a wait failed: the values are unknown
    bool received = false;          // this rank receives it: marked as written in flight
    uint64_t version = 0;           // its version when deferred: moved means written in place since
  };
  mutable std::mutex deferred_mutex_;
  std::vector<Deferred> deferred_;
  std::vector<bool> waited_in_forward_;  // per parameter: by its layers' forward pre-hooks
  struct HookedModule {
    std::weak_ptr<nn::Module> module;
    nn::Module::HookHandle forward = 0, state_dict = 0;
  };
  std::vector<HookedModule> hooked_;
  int64_t steps_ = 0;  // completed step() calls

  // Overlap (zero_overlap.cpp).
  std::string attached_;                 // set by hook_with_zero_step
  std::vector<bool> reduced_buckets_;    // buckets stepped since the last step()
  bool reduced_since_step_ = false;
  std::chrono::steady_clock::time_point last_bucket_reduced_at_{};
  std::chrono::steady_clock::time_point last_bucket_stepped_at_{};

  // Note [ZeRO state dicts].
  optim::OptimizerState consolidated_;
  int consolidated_to_ = -1;
  int64_t consolidated_at_ = -1;  // steps_ when consolidated
};

// The optimizer programs declare (docs/api.md):
//   ZeroRedundancyOptimizer<optim::AdamW> zero(params, pg, optim::AdamWOptions(1e-3));
// Inner: an optimizer of element-wise per-parameter updates constructible
// from (parameters, options) — SGD, Adam, AdamW (Note [Stepping a subset]).
// The type may be left out: ZeroRedundancyOptimizer zero(params, pg,
// optim::AdamWOptions(1e-3)) deduces it from the options.
template <class Inner>
class ZeroRedundancyOptimizer : public ZeroRedundancyOptimizerBase {
 public:
  template <class InnerOptions>
  ZeroRedundancyOptimizer(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> process_group,
                          const InnerOptions& inner, const ZeroOptions& options = ZeroOptions())
      : ZeroRedundancyOptimizerBase(
            std::move(params), std::move(process_group),
            [inner](std::vector<Tensor> shard) { return std::make_unique<Inner>(std::move(shard), inner); },
            options) {}
};

ZeroRedundancyOptimizer(std::vector<Tensor>, std::shared_ptr<ProcessGroup>, optim::SGDOptions)
    -> ZeroRedundancyOptimizer<optim::SGD>;
ZeroRedundancyOptimizer(std::vector<Tensor>, std::shared_ptr<ProcessGroup>, optim::SGDOptions, ZeroOptions)
    -> ZeroRedundancyOptimizer<optim::SGD>;
ZeroRedundancyOptimizer(std::vector<Tensor>, std::shared_ptr<ProcessGroup>, optim::AdamOptions)
    -> ZeroRedundancyOptimizer<optim::Adam>;
ZeroRedundancyOptimizer(std::vector<Tensor>, std::shared_ptr<ProcessGroup>, optim::AdamOptions, ZeroOptions)
    -> ZeroRedundancyOptimizer<optim::Adam>;
ZeroRedundancyOptimizer(std::vector<Tensor>, std::shared_ptr<ProcessGroup>, optim::AdamWOptions)
    -> ZeroRedundancyOptimizer<optim::AdamW>;
ZeroRedundancyOptimizer(std::vector<Tensor>, std::shared_ptr<ProcessGroup>, optim::AdamWOptions, ZeroOptions)
    -> ZeroRedundancyOptimizer<optim::AdamW>;

}  // namespace lockstep::distributed
