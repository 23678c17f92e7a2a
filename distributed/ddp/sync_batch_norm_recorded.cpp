// distributed/ddp/sync_batch_norm_recorded.cpp — group_sum and SyncBatchNormBackward's
// recorded formula (Note [SyncBatchNorm double backward]).
// Read before: distributed/ddp/sync_batch_norm_recorded.h.
#include "distributed/ddp/sync_batch_norm_recorded.h"

#include "autograd/functions/functions.h"
#include "core/grad_mode.h"

namespace lockstep::distributed {

namespace {

// The node of y = group_sum(t): dL/dt = group_sum(dL/dy), recorded again.
struct GroupSumBackward final : autograd::DoubleBackwardNode {
  std::shared_ptr<ProcessGroup> group;
  std::string name() const override { return "SyncBatchNormGroupSumBackward"; }
  autograd::variable_list apply(autograd::variable_list&& grads) override {
    return {group_sum(grads[0], group)};
  }
};

// Every dim of (N, C, *) but the channel dim.
IntList non_channel(int64_t dims) {
  IntList out{0};
  for (int64_t d = 2; d < dims; ++d) out.push_back(d);
  return out;
}

}  // namespace

void allreduce_sum(Tensor& t, ProcessGroup& group, const char* what) {
  try {
    group.allreduce(t, ReduceOp::SUM)->wait(group.timeout());
  } catch (const std::exception& e) {
    throw Error(
        lockstep::detail::str("SyncBatchNorm (rank ", group.rank(), "): the AllReduce of the ",
                              what, " failed: ", e.what(),
                              ". Every rank must run the same SyncBatchNorm layers in the "
                              "same order (see Note [SyncBatchNorm collectives inside DDP])"));
  }
}

Tensor group_sum(const Tensor& t, const std::shared_ptr<ProcessGroup>& group) {
  Tensor s = native::clone(t);  // a dense tensor of its own for the AllReduce
  allreduce_sum(s, *group, "recorded sums of a double backward");
  if (autograd::compute_requires_grad({t})) {
    auto node = std::make_shared<GroupSumBackward>();
    node->group = group;
    autograd::record(node, {t}, {s});
  }
  return s;
}

autograd::variable_list sync_batch_norm_backward_recorded(const Tensor& grad, const Tensor& input,
                                                          const Tensor& weight, double count,
                                                          double eps,
                                                          const std::shared_ptr<ProcessGroup>& group,
                                                          bool need_input, bool need_weight,
                                                          bool need_bias) {
  const int64_t C = input.size(1), dims = input.dim();
  const IntList red = non_channel(dims);
  IntList per_channel(static_cast<size_t>(dims), 1);  // (1, C, 1, ...)
  per_channel[1] = C;
  const Tensor x = input.to(kFloat64), g = grad.to(kFloat64);  // (N, C, *), recorded
  // The statistics of the group's batch, with history: [sum x, sum x^2] summed over the group.
  const Tensor sums = group_sum(cat({x.sum(red), (x * x).sum(red)}, 0), group);  // (2C)
  const Tensor mean = sums.narrow(0, 0, C) / count;                               // (C)
  const Tensor var = sums.narrow(0, C, C) / count - mean * mean;
  const Tensor invstd = (var + eps).rsqrt().reshape(per_channel);
  const Tensor xhat = (x - mean.reshape(per_channel)) * invstd;
  const Tensor gw = weight.defined() ? g * weight.to(kFloat64).reshape(per_channel) : g;
  // [sum gw, sum gw xhat] over the group: always issued (the same collectives on every rank).
  const Tensor gsums = group_sum(cat({gw.sum(red), (gw * xhat).sum(red)}, 0), group) / count;
  autograd::variable_list out(3);
  if (need_input) {
    const Tensor a = gsums.narrow(0, 0, C).reshape(per_channel);
    const Tensor b = gsums.narrow(0, C, C).reshape(per_channel);
    out[0] = (invstd * (gw - a - xhat * b)).to(input.dtype());
  }
  if (need_weight && weight.defined()) out[1] = (g * xhat).sum(red).to(weight.dtype());
  if (need_bias) out[2] = g.sum(red).to(input.dtype());
  return out;
}

}  // namespace lockstep::distributed
