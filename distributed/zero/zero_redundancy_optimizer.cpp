// distributed/zero/zero_redundancy_optimizer.cpp — construction, step(),
// clip_grad_norm_ and the learning rate (the broadcasts: zero_broadcasts.cpp).
//
// § Note [ZeRO clip_grad_norm_]
// ZeRO stage 1 shards only the optimizer state: after DDP's backward every
// rank holds every averaged gradient, bitwise the same on every rank. So the
// global norm needs no communication — it is optim::clip_grad_norm_ over all
// parameters, the same blocks summed in the same order as plain DDP's call,
// hence the same double on every rank and the same clipped gradients. (A
// norm summed per shard and all-reduced would differ from plain DDP's in the
// last bits.) With overlap_with_ddp the shards have been stepped before
// backward returns, so there is nothing left to clip: refused.
// Read before: distributed/zero/zero_redundancy_optimizer.h.
// Read next: distributed/zero/zero_broadcasts.cpp, distributed/zero/zero_state_dict.cpp,
// distributed/zero/zero_overlap.cpp.
#include "distributed/zero/zero_redundancy_optimizer.h"

#include <cstdio>
#include <limits>
#include <map>

#include "core/factory.h"
#include "core/grad_mode.h"
#include "distributed/store/store.h"
#include "optim/clip_grad.h"

namespace lockstep::distributed {

namespace {
constexpr size_t kNone = std::numeric_limits<size_t>::max();
}  // namespace

ZeroRedundancyOptimizerBase::ZeroRedundancyOptimizerBase(std::vector<Tensor> params,
                                                 std::shared_ptr<ProcessGroup> process_group,
                                                 InnerOptimizerFactory make_inner, const ZeroOptions& options)
    : Optimizer(std::move(params), "ZeroRedundancyOptimizer"),
      process_group_(std::move(process_group)),
      options_(options) {
  LS_CHECK(process_group_ != nullptr, name_, ": the process group is null; pass the group DDP uses");
  LS_CHECK(make_inner != nullptr, name_, ": no inner optimizer; pass SGDOptions, AdamOptions or AdamWOptions");
  LS_CHECK(!options_.shard_gradients() || options_.overlap_with_ddp(), name_, ": ZeroOptions().shard_gradients(true) "
           "(ZeRO-2) needs overlap_with_ddp(true): the gradients are sharded by DDP's Reducer, which steps each "
           "bucket's shard as it is reduced (hook_with_zero_step). Add .overlap_with_ddp(true)");
  broadcaster_ = options_.broadcast_group() ? options_.broadcast_group() : make_broadcast_group();
  LS_CHECK(broadcaster_->rank() == process_group_->rank() && broadcaster_->size() == process_group_->size(), name_,
           ": ZeroOptions().broadcast_group is rank ", broadcaster_->rank(), " of ", broadcaster_->size(),
           " but the optimizer's group is rank ", process_group_->rank(), " of ", process_group_->size(),
           "; it must be a second group over the same ranks (Note [ZeRO broadcast group])");
  check_same_parameters_on_all_ranks();
  LS_CHECK(split_parameters_mb() >= 0 && options_.broadcast_piece_mb() >= 0, name_,
           ": ZeroOptions().split_parameters_mb (", split_parameters_mb(), ") and broadcast_piece_mb (",
           options_.broadcast_piece_mb(), ") must be >= 0 (0: off)");
  const auto split_bytes = static_cast<int64_t>(split_parameters_mb() * (1 << 20));
  partition_ = partition_parameters(params_, process_group_->size(), split_bytes);
  const int me = process_group_->rank();
  const auto& mine = partition_.owned[static_cast<size_t>(me)];
  local_index_.assign(params_.size(), kNone);
  slices_.assign(params_.size(), Tensor());
  std::vector<Tensor> shard;
  for (size_t i : mine) {
    local_index_[i] = shard.size();
    if (partition_.split(i)) {
      // Note [ZeRO split parameters]: the inner optimizer steps a view of this
      // rank's slice (1-D), which writes straight into the parameter.
      const ZeroPartition::Range r = partition_.range(i, me);
      slices_[i] = params_[i].detach().view({-1}).narrow(0, r.begin, r.length);  // (length)
      slices_[i].requires_grad_(params_[i].requires_grad());  // optimizers skip frozen parameters
      shard.push_back(slices_[i]);
    } else {
      shard.push_back(params_[i]);
    }
  }
  if (shard.empty()) {
    // Optimizers refuse an empty list; a placeholder that never gets a
    // gradient keeps the hyper-parameters (and the schedulers' lr).
    shard.push_back(zeros({1}, TensorOptions().dtype(params_[0].dtype())));
    placeholder_ = true;
  }
  inner_ = make_inner(std::move(shard));
  LS_CHECK(inner_ != nullptr, name_, ": the inner optimizer factory returned null");
}

// § Note [ZeRO destructor reports]
// A destructor cannot throw, but a broadcast that failed by then (a peer that
// never stepped, one that died) means this rank's parameters are not the
// others': saying nothing would let the job exit 0 with diverged replicas. So
// the destructor still waits for every broadcast, and reports the first failure
// on stderr and in the process group's store, under
// "lockstep/zero_failures/<rank>" (where the progress board lives,
// Note [Progress board]), for the launcher's and the peers' diagnostics.
ZeroRedundancyOptimizerBase::~ZeroRedundancyOptimizerBase() {
  {
    std::lock_guard<std::mutex> lock(deferred_mutex_);
    remove_forward_waits();  // they would call this optimizer
  }
  // Broadcasts still in flight reference our tensors: let them finish.
  std::string failure;
  auto note = [&](const std::exception& e) {
    if (failure.empty()) failure = e.what();
  };
  for (const auto* list : {&pending_, &sent_}) {
    for (const auto& b : *list) {
      try {
        b.work->wait(broadcaster_->timeout());
      } catch (const std::exception& e) {
        note(e);
      }
    }
  }
  try {
    land_all();  // Note [ZeRO broadcasts overlap the next forward]
  } catch (const std::exception& e) {
    note(e);
  }
  {
    // Failed receives stay marked while this optimizer lives (their values are
    // unknown); its report below is what is left to say about them.
    std::lock_guard<std::mutex> lock(deferred_mutex_);
    for (size_t i = 0; i < deferred_.size(); ++i) unmark_received(i);
  }
  if (!failure.empty()) report_destructor_failure(failure);
}

void ZeroRedundancyOptimizerBase::report_destructor_failure(const std::string& failure) const noexcept {
  try {
    const std::string message = lockstep::detail::str(
        where(), ": destroyed while parameter broadcasts of its last step() had failed: ", failure,
        ". This rank's parameters are not the other ranks' ones; every rank must call step() (and "
        "consolidate_state_dict) together, and the program should not exit successfully.");
    std::fprintf(stderr, "lockstep: %s\n", message.c_str());
    std::fflush(stderr);
    if (std::shared_ptr<Store> store = process_group_->store()) {
      store->set(lockstep::detail::str("lockstep/zero_failures/", process_group_->rank()), message);
    }
  } catch (...) {
    // Reporting is best effort: the store may be gone with the failed peer.
  }
}

std::string ZeroRedundancyOptimizerBase::where() const {
  return lockstep::detail::str(name_, " (rank ", process_group_->rank(), ")");
}

// A rank with other parameters would compute another partition, and the
// broadcasts would pair up wrong tensors: compare (count, elements, a shape hash).
void ZeroRedundancyOptimizerBase::check_same_parameters_on_all_ranks() {
  int64_t elements = 0, hash = 1469598103934665603LL;
  for (const Tensor& p : params_) {
    elements += p.numel();
    for (int64_t d : p.sizes()) hash = (hash ^ d) * 1099511628211LL;
    hash = (hash ^ static_cast<int64_t>(p.dtype())) * 1099511628211LL;
  }
  Tensor mine = tensor(std::vector<int64_t>{static_cast<int64_t>(params_.size()), elements, hash}, {3});
  std::vector<Tensor> all;
  process_group_->allgather(all, mine)->wait(process_group_->timeout());
  const auto m = mine.to_vector<int64_t>();
  for (int r = 0; r < process_group_->size(); ++r) {
    const auto o = all[static_cast<size_t>(r)].to_vector<int64_t>();
    LS_CHECK(o == m, where(), ": rank ", r, " passed ", o[0], " parameters of ", o[1], " elements, this rank ",
             m[0], " of ", m[1], o[0] == m[0] && o[1] == m[1] ? " (shapes or dtypes differ)" : "",
             "; every rank must pass the same parameters, in the same order (model->parameters() of the same model)");
  }
}

void ZeroRedundancyOptimizerBase::step() {
  if (options_.overlap_with_ddp()) {
    LS_CHECK(!attached_.empty(), where(), ".step: ZeroOptions().overlap_with_ddp(true) but the optimizer is not "
             "attached to a DDP module; call hook_with_zero_step(ddp, optimizer) once after constructing both");
    LS_CHECK(reduced_since_step_, where(), ".step (overlap_with_ddp): no synced backward since the last step, "
             "so there is nothing to step. Call backward() through the DDP module first; inside ddp.no_sync() "
             "call step() only after the synced backward that ends the accumulation");
    end_step_broadcasts();
    reduced_since_step_ = false;
    reduced_buckets_.clear();
    ++steps_;
    return;
  }
  bool any_grad = false;
  for (const Tensor& p : params_) any_grad = any_grad || p.grad().defined();
  LS_CHECK(any_grad, where(), ".step: no parameter has a gradient; call loss.backward() (through the DDP "
           "module) before step()");
  std::vector<size_t> all(params_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  finish_broadcasts();  // the last step's, if the forward left any (this rank overwrites its own next)
  step_and_broadcast(all);
  end_step_broadcasts();
  ++steps_;
}

double ZeroRedundancyOptimizerBase::clip_grad_norm_(double max_norm, double norm_type) {
  // Note [ZeRO clip_grad_norm_].
  LS_CHECK(!options_.overlap_with_ddp(), where(), ".clip_grad_norm_: with ZeroOptions().overlap_with_ddp(true) "
           "each bucket's parameters are stepped as soon as the bucket is reduced, before the global norm is "
           "known; clipping needs the plain ZeroRedundancyOptimizer (overlap_with_ddp(false))");
  return optim::clip_grad_norm_(params_, max_norm, norm_type);
}

std::vector<std::pair<std::string, double>> ZeroRedundancyOptimizerBase::hyperparameters() const {
  std::vector<std::pair<std::string, double>> out;
  const std::string prefix = "param_groups.";
  for (const auto& [key, value] : inner_->state_dict()) {
    if (key.rfind(prefix, 0) == 0 && key != "param_groups.num_params") {
      out.emplace_back(key.substr(prefix.size()), value.item<double>());
    }
  }
  return out;
}

void ZeroRedundancyOptimizerBase::set_hyperparameters(const std::map<std::string, double>& values) {
  optim::OptimizerState s = inner_->state_dict();
  for (const auto& [name, value] : values) {
    s["param_groups." + name] = scalar_tensor(value, TensorOptions().dtype(kFloat64));
  }
  inner_->load_state_dict(s);
}

}  // namespace lockstep::distributed
