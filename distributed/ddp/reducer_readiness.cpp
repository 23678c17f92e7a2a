// distributed/ddp/reducer_readiness.cpp — the used-parameter bitmap, the default
// readiness policy (every parameter once per backward) and find_unused_parameters'
// (graph traversal + bitmap): Note [Readiness policies] in reducer_readiness.h.
// Read before: distributed/ddp/reducer_readiness.h, autograd/graph_traversal.h.
// Read next: distributed/ddp/reducer_static_graph.cpp.
#include "distributed/ddp/reducer_readiness.h"

#include <unordered_set>

#include "autograd/graph_traversal.h"
#include "core/native/native.h"

namespace lockstep::distributed {

UsedBitmap::UsedBitmap(size_t num_params)
    : local_(native::zeros({static_cast<int64_t>(num_params)}, kInt64)) {}

void UsedBitmap::start(ProcessGroup& process_group, bool zeros) {
  global_ = zeros ? native::zeros_like(local_) : native::clone(local_);  // (num params) int64
  work_ = process_group.allreduce(global_, ReduceOp::SUM);
  ++allreduces_;
}

std::vector<int64_t> UsedBitmap::wait(const BitmapWait& wait) {
  if (!work_) return {};
  auto work = std::move(work_);
  work_.reset();
  wait(*work);
  return global_.to_vector<int64_t>();
}

void UsedBitmap::clear() { native::fill_(local_, 0.0); }

namespace {

// The paper's base case: every parameter gets one gradient per backward.
class EveryParameterReadiness final : public ReadinessPolicy {
 public:
  std::vector<size_t> prepare(const std::vector<Tensor>&) override { return {}; }
};

// find_unused_parameters(true): Note [Readiness policies].
class UnusedParameterReadiness final : public ReadinessPolicy {
 public:
  UnusedParameterReadiness(const std::vector<Tensor>& params, ProcessGroup& process_group)
      : params_(params), process_group_(process_group), used_(params_.size()) {}

  // Parameters the graph cannot reach get no gradient this iteration: they are
  // ready now. The bitmap of parameters used locally (here or in the no_sync
  // iterations before) is summed across ranks while backward runs.
  std::vector<size_t> prepare(const std::vector<Tensor>& outputs) override {
    std::unordered_set<const TensorImpl*> reached;
    for (const auto& acc : autograd::reachable_accumulators(outputs)) reached.insert(acc->variable().impl());
    std::vector<size_t> unused;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (reached.count(params_[i].impl())) {
        used_.mark(i);
      } else {
        unused.push_back(i);
      }
    }
    used_.start(process_group_);
    used_.clear();
    return unused;
  }
  void record_use(size_t index) override { used_.mark(index); }
  std::vector<int64_t> globally_used(const BitmapWait& wait) override { return used_.wait(wait); }
  // This backward's hooks marked parameters the bitmap already counted: the
  // next bitmap counts from the next forward (and its no_sync iterations) only.
  void backward_finished() override { used_.clear(); }

  bool forward_issues_collective() const override { return true; }
  bool tracks_unused() const override { return true; }
  std::vector<int64_t> locally_used() const override { return used_.local(); }
  void shadow_before_fingerprint() override { used_.start(process_group_, /*zeros=*/true); }
  void shadow_wait(const BitmapWait& wait) override { used_.wait(wait); }
  int64_t bitmap_allreduces() const override { return used_.allreduces(); }

 private:
  std::vector<Tensor> params_;
  ProcessGroup& process_group_;
  UsedBitmap used_;
};

}  // namespace

std::unique_ptr<ReadinessPolicy> make_readiness_policy(const DDPOptions& options, const std::vector<Tensor>& params,
                                                       std::vector<std::string> names, ProcessGroup& process_group) {
  if (options.static_graph()) return make_static_graph_readiness(std::move(names), process_group);
  if (options.find_unused_parameters()) return std::make_unique<UnusedParameterReadiness>(params, process_group);
  return std::make_unique<EveryParameterReadiness>();
}

}  // namespace lockstep::distributed
