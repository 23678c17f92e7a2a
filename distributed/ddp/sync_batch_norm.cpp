// distributed/ddp/sync_batch_norm.cpp — the synchronised batch_norm op, its
// backward node, SyncBatchNorm and convert_sync_batchnorm.
// Read before: distributed/ddp/sync_batch_norm.h (the formulas and Note
// [SyncBatchNorm collectives inside DDP]), autograd/functions/batch_norm.cpp
// (the local op this one mirrors). Its double backward: sync_batch_norm_recorded.h.
#include "core/autocast.h"
#include "distributed/ddp/sync_batch_norm.h"
#include "distributed/ddp/sync_batch_norm_recorded.h"

#include "autograd/functions/functions.h"
#include "core/grad_mode.h"
#include "core/native/nn_kernels.h"
#include "core/profiler.h"

namespace lockstep::distributed {

namespace {

using native::BinaryOp;

// (C) -> (1, C, 1, ...) so it broadcasts against (N, C, *).
Tensor per_channel(const Tensor& v, int64_t dims) {
  IntList shape(static_cast<size_t>(dims), 1);
  shape[1] = v.size(0);
  return native::reshape(v, shape);
}

// Every dim of (N, C, *) but the channel dim.
IntList non_channel_dims(int64_t dims) {
  IntList out{0};
  for (int64_t d = 2; d < dims; ++d) out.push_back(d);
  return out;
}

struct SyncBatchNormBackward final : autograd::BackwardNode {
  autograd::SavedVariable input, weight, save_mean, save_invstd;  // weight may be undefined
  double count = 0;                                               // n over the whole group
  double eps = 1e-5;                                              // for the recorded formula
  std::shared_ptr<ProcessGroup> group;
  std::string name() const override { return "SyncBatchNormBackward"; }
  bool supports_double_backward() const override { return true; }

  autograd::variable_list apply(autograd::variable_list&& grads) override {
    if (GradMode::is_enabled()) {  // create_graph: Note [SyncBatchNorm double backward]
      return sync_batch_norm_backward_recorded(grads[0], input.unpack(name()), weight.unpack(name()),
                                               count, eps, group, should_compute_output(0),
                                               should_compute_output(1), should_compute_output(2));
    }
    NoGradGuard no_grad;
    const Tensor x = input.unpack(name());             // (N, C, *)
    const Tensor w = weight.unpack(name());            // (C) or undefined
    const Tensor mean = save_mean.unpack(name());      // (C)
    const Tensor invstd = save_invstd.unpack(name());  // (C)
    const Tensor& g = grads[0];                        // (N, C, *)
    // Eval-mode backward with the group's statistics gives this rank's
    // sum dy (= db) and sum dy * xhat (= dw), and w * invstd * dy.
    auto [dx_local, sum_gx, sum_g] = native::batch_norm_backward(
        g, x, w, mean, invstd, /*training=*/false, should_compute_output(0), /*need_weight=*/true,
        /*need_bias=*/true);
    const int64_t C = mean.size(0);
    // (2C) float64: [sum dy, sum dy * xhat], summed over the group. Always
    // issued: see Note [SyncBatchNorm collectives inside DDP].
    Tensor sums = native::to_dtype(native::cat({sum_g, sum_gx}, 0), kFloat64);
    allreduce_sum(sums, *group, "gradient sums [sum dy, sum dy*xhat]");
    Tensor dx;
    if (should_compute_output(0)) {
      const Tensor inv64 = native::to_dtype(invstd, kFloat64);  // (C)
      Tensor scale = w.defined()
                         ? native::binary(BinaryOp::Mul, native::to_dtype(w, kFloat64), inv64)
                         : inv64;  // w * invstd (C)
      scale = native::binary_scalar(BinaryOp::Div, scale, count);
      const Tensor a = native::binary(BinaryOp::Mul, scale, native::narrow(sums, 0, 0, C));  // (C)
      const Tensor b = native::binary(BinaryOp::Mul, native::binary(BinaryOp::Mul, scale, inv64),
                                      native::narrow(sums, 0, C, C));  // (C)
      // dx = w invstd dy - a - (x - mean) * b
      const ScalarType dt = x.dtype();
      const int64_t dims = x.dim();
      const Tensor b_t = per_channel(native::to_dtype(b, dt), dims);
      const Tensor shift = native::to_dtype(
          native::binary(BinaryOp::Sub,
                         native::binary(BinaryOp::Mul, native::to_dtype(mean, kFloat64), b), a),
          dt);  // mean * b - a (C)
      dx = native::binary(BinaryOp::Sub, dx_local, native::binary(BinaryOp::Mul, x, b_t));
      native::binary_(BinaryOp::Add, dx, per_channel(shift, dims));
    }
    return {dx, should_compute_output(1) ? sum_gx : Tensor(),
            should_compute_output(2) ? sum_g : Tensor()};
  }

  void release_variables() override {
    input.reset();
    weight.reset();
    save_mean.reset();
    save_invstd.reset();
  }
};

}  // namespace

Tensor sync_batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias,
                       const Tensor& running_mean, const Tensor& running_var, double momentum,
                       double eps, const std::shared_ptr<ProcessGroup>& group_ptr) {
  LS_CHECK(group_ptr != nullptr, "sync_batch_norm: the process group is null");
  if (is_autocast_enabled() && input.defined() && input.dtype() == kBFloat16) {
    // Under autocast the group statistics run in float32 on the bf16 activations
    // (Note [Autocast policy] in core/autocast.h); the cast is differentiable.
    return sync_batch_norm(input.to(kFloat32), weight, bias, running_mean, running_var, momentum,
                           eps, group_ptr);
  }
  ProcessGroup& group = *group_ptr;
  profiler::Scope prof("sync_batch_norm");
  LS_CHECK(input.defined() && input.dim() >= 2, "sync_batch_norm (rank ", group.rank(),
           "): expected an input (N, C, *) but got ",
           input.defined() ? input.shape_str() : "an undefined tensor");
  LS_CHECK(input.dtype() == kFloat32 || input.dtype() == kFloat64, "sync_batch_norm (rank ",
           group.rank(), "): expected a float32 or float64 input but got ", input.dtype());
  const int64_t C = input.size(1);
  const int64_t dims = input.dim();
  Tensor mean, var;  // (C) in the input's dtype: the group's statistics
  double count = 0;
  {
    NoGradGuard no_grad;
    // (2C + 1) float64: [sum x, sum x^2, count], summed over the group.
    const Tensor x64 = native::to_dtype(input, kFloat64);               // (N, C, *)
    const Tensor s1 = native::sum(x64, non_channel_dims(dims), false);  // (C)
    const Tensor s2 =
        native::sum(native::binary(BinaryOp::Mul, x64, x64), non_channel_dims(dims), false);
    Tensor n_local = native::empty({1}, kFloat64, input.device());  // (1) beside s1, s2 (CPU or CUDA)
    native::fill_(n_local, static_cast<double>(input.numel() / C));
    Tensor stats = native::cat({s1, s2, n_local}, 0);
    allreduce_sum(stats, group, "batch statistics [sum x, sum x^2, count]");
    {
      // The host needs the count: an explicit copy (it waits for the AllReduce on a device).
      Tensor count_host = native::empty({1}, kFloat64);  // (1), CPU
      native::copy_(count_host, native::narrow(stats, 0, 2 * C, 1));
      count = count_host.item<double>();
    }
    LS_CHECK(count > 1, "SyncBatchNorm (rank ", group.rank(),
             "): expected more than 1 value per "
             "channel over the whole group when training but got ",
             count, " (this rank's input ", input.shape_str(),
             "); use larger batches or call eval()");
    const Tensor mean64 =
        native::binary_scalar(BinaryOp::Div, native::narrow(stats, 0, 0, C), count);
    Tensor var64 = native::binary(
        BinaryOp::Sub, native::binary_scalar(BinaryOp::Div, native::narrow(stats, 0, C, C), count),
        native::binary(BinaryOp::Mul, mean64, mean64));
    Tensor zero = native::empty({}, kFloat64, input.device());  // () on the input's device
    native::fill_(zero, 0.0);
    var64 = native::binary(BinaryOp::Maximum, var64, zero);  // rounding below 0
    mean = native::to_dtype(mean64, input.dtype());
    var = native::to_dtype(var64, input.dtype());
    // running = (1 - momentum) running + momentum batch (unbiased var), on
    // every rank alike: the inputs are the group's sums.
    if (running_mean.defined()) {
      const Tensor next =
          native::add(native::binary_scalar(BinaryOp::Mul, native::to_dtype(running_mean, kFloat64),
                                            1.0 - momentum),
                      mean64, momentum);
      native::copy_(running_mean, next);
    }
    if (running_var.defined()) {
      const Tensor next =
          native::add(native::binary_scalar(BinaryOp::Mul, native::to_dtype(running_var, kFloat64),
                                            1.0 - momentum),
                      var64, momentum * count / (count - 1));
      native::copy_(running_var, next);
    }
  }
  // Normalising with given statistics is the eval-mode kernel.
  auto [out, save_mean, save_invstd] =
      native::batch_norm_forward(input, weight, bias, mean, var, /*training=*/false, momentum, eps);
  if (autograd::compute_requires_grad({input, weight, bias})) {
    auto node = std::make_shared<SyncBatchNormBackward>();
    node->input = autograd::SavedVariable(input);
    node->weight = autograd::SavedVariable(weight);
    node->save_mean = autograd::SavedVariable(save_mean);
    node->save_invstd = autograd::SavedVariable(save_invstd);
    node->count = count;
    node->eps = eps;
    node->group = group_ptr;
    autograd::record(node, {input, weight, bias}, {out});
  }
  return out;
}

SyncBatchNormStatistics::SyncBatchNormStatistics(std::shared_ptr<ProcessGroup> group)
    : group_(std::move(group)) {
  LS_CHECK(group_ != nullptr,
           "SyncBatchNorm: the process group is null; pass the one "
           "init_process_group returned");
}

Tensor SyncBatchNormStatistics::forward(nn::BatchNorm2d& bn, const Tensor& input) {
  {
    NoGradGuard no_grad;
    bn.num_batches_tracked.add_(1.0);
  }
  return sync_batch_norm(input, bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.momentum,
                         bn.eps, group_);
}

SyncBatchNorm::SyncBatchNorm(int64_t num_features, std::shared_ptr<ProcessGroup> group, double eps,
                             double momentum)
    : nn::BatchNorm2d(num_features, eps, momentum) {
  group_statistics = std::make_shared<SyncBatchNormStatistics>(std::move(group));
}

std::shared_ptr<nn::Module> convert_sync_batchnorm(std::shared_ptr<nn::Module> module,
                                                   std::shared_ptr<ProcessGroup> group) {
  LS_CHECK(module != nullptr, "convert_sync_batchnorm: the module is null");
  auto strategy = std::make_shared<SyncBatchNormStatistics>(std::move(group));
  for (auto& [name, m] : module->named_modules()) {
    if (auto bn = std::dynamic_pointer_cast<nn::BatchNorm2d>(m)) bn->group_statistics = strategy;
  }
  return module;
}

}  // namespace lockstep::distributed
