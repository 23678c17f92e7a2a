// distributed/ddp/distributed_data_parallel.h — DistributedDataParallel: the
// module wrapper that makes N processes train as one.
//
//   auto pg = ls::distributed::init_process_group("gloo");
//   ls::distributed::DistributedDataParallel ddp(net, pg, ls::distributed::DDPOptions());
//   ls::Tensor loss = ls::nn::functional::cross_entropy(ddp.forward(x), y);
//   loss.backward();   // gradients are averaged across ranks when this returns
//   opt.step();        // same update on every rank
//
// Construction checks that every rank holds the same parameters (names,
// shapes, dtypes; the error names the first mismatch and the rank), then
// broadcasts parameters and buffers from rank 0 so all replicas start equal
// (paper Section 3.2.1). forward() broadcasts buffers (when broadcast_buffers),
// calls the module's own forward with any arguments, and arms the Reducer with
// the outputs. Every synced iteration also checks that all ranks are at the
// same point (Note [DDP iteration fingerprint], distributed/ddp/ddp_fingerprint.h):
// a rank that skipped a backward makes every rank throw within that iteration.
// no_sync() returns a guard: backward passes inside it only accumulate local
// gradients; the first synced backward after it reduces the sum (paper
// Section 3.2.4). Beyond the paper: register_comm_hook (comm_hook.h),
// join(fn) for uneven inputs (ddp_join.h), the options
// gradient_as_bucket_view (reducer_buckets.cpp) and rebuild_buckets
// (reducer_rebuild.cpp),
// progress_store (ddp_progress.h), static_graph (Note [Static graph] in
// reducer_static_graph.cpp), deterministic (deterministic_reduction.h) and
// autotune_buckets (bucket_autotune.h). docs/ddp.md sections 5-12 walk through them.
//
// Read before: distributed/ddp/reducer.h. Read next: docs/ddp.md.
#pragma once

#include <concepts>
#include <functional>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "distributed/ddp/bucket_autotune.h"
#include "distributed/ddp/comm_hook.h"
#include "distributed/ddp/ddp_join.h"
#include "distributed/ddp/ddp_options.h"
#include "distributed/process_group/process_group.h"
#include "distributed/ddp/reducer.h"
#include "distributed/ddp/optimizer_step_check.h"
#include "distributed/ddp/replica_check.h"
#include "nn/module.h"

namespace lockstep::distributed {

namespace detail {

// The non-template part of DistributedDataParallel (distributed_data_parallel.cpp).
class DDPCore {
 public:
  DDPCore(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> process_group,
          const DDPOptions& options);
  ~DDPCore();
  void pre_forward();
  void post_forward(const std::vector<Tensor>& outputs);
  // The buffers a synced forward broadcasts: none when broadcast_buffers is
  // off, in a world of one, or when the module has none.
  nn::NamedTensors synced_buffers() const;
  // Whether a synced forward issues collectives before the module's forward —
  // buffer broadcasts, the used-parameter bitmap (when it `arms` the reducer),
  // the bucket rebuild — and so exchanges the fingerprint first (Note [DDP
  // iteration fingerprint]). Training ranks and joined ones decide alike.
  bool forward_exchanges_fingerprint(const nn::NamedTensors& buffers, bool arms, bool rebuild) const;
  void broadcast_from(const nn::NamedTensors& tensors, int source, const char* what);

  nn::Module& module() const { return *module_; }
  ProcessGroup& process_group() const { return *process_group_; }
  const DDPOptions& options() const { return options_; }
  Reducer& reducer() const { return *reducer_; }
  // false inside no_sync() (NoSyncGuard).
  bool require_sync() const { return require_sync_; }
  void set_require_sync(bool v) { require_sync_ = v; }
  // Set while join() runs (ddp_join.h; JoinScope installs and removes it).
  JoinState* join() const { return join_.get(); }
  void set_join(std::unique_ptr<JoinState> join) { join_ = std::move(join); }
  // With autotune_buckets (bucket_autotune.h).
  const std::optional<BucketChoice>& bucket_choice() const { return bucket_choice_; }
  // Note [Optimizer step check].
  void set_step_counter(StepCounter counter) { replica_check_->set_step_counter(std::move(counter)); }
  // Note [Replica check at checkpoints].
  void check_replicas();

 private:
  bool require_sync_ = true;
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> process_group_;
  DDPOptions options_;
  std::unique_ptr<Reducer> reducer_;
  std::unique_ptr<JoinState> join_;
  std::optional<BucketChoice> bucket_choice_;
  std::unique_ptr<ReplicaCheck> replica_check_;  // Note [Replica divergence check]
};

// The tensors in a forward's result, whatever its type: a Tensor, a vector of
// them, or a tuple/pair holding Tensors (other members are ignored).
inline void collect(const Tensor& t, std::vector<Tensor>& out) { out.push_back(t); }
inline void collect(const std::vector<Tensor>& ts, std::vector<Tensor>& out) {
  out.insert(out.end(), ts.begin(), ts.end());
}
template <class T>
void collect(const T&, std::vector<Tensor>&) {}
template <class... Ts>
void collect(const std::tuple<Ts...>& t, std::vector<Tensor>& out) {
  std::apply([&](const auto&... e) { (collect(e, out), ...); }, t);
}
template <class A, class B>
void collect(const std::pair<A, B>& p, std::vector<Tensor>& out) {
  collect(p.first, out);
  collect(p.second, out);
}

}  // namespace detail

// RAII: while alive, backward passes through the DDP module do not communicate.
class NoSyncGuard {
 public:
  explicit NoSyncGuard(detail::DDPCore& core) : core_(core), previous_(core.require_sync()) {
    core_.set_require_sync(false);
  }
  ~NoSyncGuard() { core_.set_require_sync(previous_); }
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;

 private:
  detail::DDPCore& core_;
  bool previous_;
};

template <class M>
class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<M> module, std::shared_ptr<ProcessGroup> process_group,
                          const DDPOptions& options = DDPOptions())
      : module_(module), core_(module, std::move(process_group), options) {}
  // A module holder (LS_MODULE, nn/module_holder.h): wraps the module it holds.
  template <class Holder>
    requires std::same_as<typename Holder::ContainedType, M>
  DistributedDataParallel(const Holder& module, std::shared_ptr<ProcessGroup> process_group,
                          const DDPOptions& options = DDPOptions())
      : DistributedDataParallel(module.ptr(), std::move(process_group), options) {}

  // Calls module->forward(args...) between DDP's pre- and post-forward steps.
  template <class... Args>
  decltype(auto) forward(Args&&... args) {
    core_.pre_forward();
    auto result = module_->forward(std::forward<Args>(args)...);
    std::vector<Tensor> outputs;
    detail::collect(result, outputs);
    core_.post_forward(outputs);
    return result;
  }

  // ddp(x) is ddp.forward(x), as a module's call is in libtorch and PyTorch.
  template <class... Args>
  decltype(auto) operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }
  // DDP is a module in PyTorch: ddp.parameters() are the wrapped module's (a
  // shared one listed once, Note [Shared parameters] in nn/module.h), and
  // `ddp->module()`, `ddp->parameters()` work as on a module holder.
  std::vector<Tensor> parameters(bool recurse = true) const { return module_->parameters(recurse); }
  nn::NamedTensors named_parameters(bool recurse = true) const { return module_->named_parameters(recurse); }
  DistributedDataParallel* operator->() { return this; }
  const DistributedDataParallel* operator->() const { return this; }
  // The replica check compares this optimizer's step count across ranks too
  // (Note [Optimizer step check]); it must outlive this wrapper's forwards.
  template <class Optimizer>
  void register_optimizer(const Optimizer& optimizer) {
    core_.set_step_counter(detail::step_counter(optimizer));
  }
  // The same with a count the training loop keeps (steps taken so far).
  void register_step_count(std::function<int64_t()> count) {
    LS_CHECK(count != nullptr, "DistributedDataParallel::register_step_count: the count is empty");
    core_.set_step_counter(detail::step_counter(std::move(count)));
  }

  // Compares every rank's parameters (and registered step count) now, whatever
  // check_replicas_every says; throws the replica check's ls::Error on every rank
  // when they differ. A collective: call it on every rank at the same point, e.g.
  // before saving a checkpoint (Note [Replica check at checkpoints]).
  void check_replicas() { core_.check_replicas(); }

  // `auto guard = ddp.no_sync();` — see NoSyncGuard.
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(core_); }

  // Runs fn() (a training loop over this rank's inputs, however many) and then
  // mirrors the collectives of the ranks still training until every rank has
  // finished; see Note [Join: shadowing the collectives] (ddp_join.h).
  template <class Fn>
  void join(Fn&& fn, const JoinOptions& options = JoinOptions()) {
    detail::JoinScope scope(core_, options);
    std::forward<Fn>(fn)();
    scope.finish();
  }

  // Replaces the bucket AllReduce with hook(*state, bucket) -> TensorFuture
  // (Note [Communication hooks], comm_hook.h). Once, before the first backward.
  template <class State, class Hook>
  void register_comm_hook(std::shared_ptr<State> state, Hook hook) {
    LS_CHECK(state != nullptr, "DistributedDataParallel::register_comm_hook: the state is null");
    core_.reducer().register_comm_hook(
        [state = std::move(state), hook = std::move(hook)](GradBucket& bucket) -> TensorFuture {
          return hook(*state, bucket);
        });
  }

  // Note [Reducer plug-ins] (reducer_plugin.h): once, after construction
  // (ZeRO's: register_bucket_reduced_hook and hook_with_zero_step, distributed/zero/).
  void attach_reducer_plugin(std::unique_ptr<ReducerPlugin> plugin) {
    core_.reducer().attach_plugin(std::move(plugin));
  }

  const std::shared_ptr<M>& module() const { return module_; }
  ProcessGroup& process_group() const { return core_.process_group(); }
  const Reducer& reducer() const { return core_.reducer(); }
  const DDPOptions& options() const { return core_.options(); }
  // With DDPOptions().autotune_buckets(true): what the measurement chose (the
  // same on every rank; options() holds the chosen sizes). Otherwise empty.
  const std::optional<BucketChoice>& bucket_choice() const { return core_.bucket_choice(); }

 private:
  std::shared_ptr<M> module_;
  detail::DDPCore core_;
};

// DistributedDataParallel ddp(net, pg) for a holder `net` (LS_MODULE(Net)).
template <class Holder, class... Rest>
  requires requires { typename Holder::ContainedType; }
DistributedDataParallel(const Holder&, Rest&&...) -> DistributedDataParallel<typename Holder::ContainedType>;

}  // namespace lockstep::distributed
