// autograd/functions/autocast_ops.cpp — linear and conv2d in bfloat16, and the policy's casts.
//
// § Note [Autocast casts inside the op]
// Under autocast a Linear's weight W is float32 and its product runs in bf16.
// Written as linear(x.to(bf16), W.to(bf16), b.to(bf16)), the graph would gain a
// ToCopyBackward per operand, W's gradient would be computed in bf16 and only
// then widened, and every step would round it to 8 bits of mantissa before the
// optimizer sees it. Instead the op records ONE node whose inputs are the
// original tensors: forward converts x (per call) and W (once per guard, the
// cast cache of core/autocast.h) to bf16 and runs the bf16 kernel; backward
// returns dX in x's own dtype and dW, db in float32 straight from the float32
// accumulators of the bf16 GEMM / convolution. The node saves only the bf16
// copies (half the bytes of the float32 operands). linear's forward hands the
// GEMM W's bf16 copy as a transposed B operand, and backward's dX = G W reads
// the same copy as it is: one cast of W per guard.
//
// § Note [linear's weight as a transposed operand]
// Until 2026-12-03 the forward read W^T from a second cached copy, transposed
// while cast (autocast::cached_cast_transposed), after a loaded-machine BERT
// step had run the transposed operand slower. Measured again, oneDNN's AMX
// matmul takes a transposed B as fast as a row-major one at the shapes of
// BERT-base and the SmallCNN, while the transposing cast costs a pass over
// every weight, every step; dropping the copy made the bf16 steps faster and
// smaller, with bit-identical results (the numbers: docs/results/kernel_choices.md).
// LOCKSTEP_BF16_LINEAR_WT_COPY=1 brings the copy back (A/B runs).
//
//   linear   y (*, out) bf16 = x (*, in) W^T (in, out) + b     dX = G W      (*, in)
//                                                              dW = G^T X    (out, in) f32
//                                                              db = sum_rows G (out)   f32
//   conv2d   y (N, C_out, oH, oW) bf16                         see core/native/conv_bf16.h
//
// § Note [linear's input gradient summed in place]
// A float32 activation that feeds a linear and something else (BERT's residual
// stream feeds the next attention or feed-forward and the residual add) gets two
// gradients, and the engine sums them in a pass that reads two and writes one
// (Note [Gradients summed in place] in autograd/engine.cpp; ~9 MB per sum for
// BERT-base, 24 a step). When the other gradient is already waiting and nobody
// else sees it, the engine hands it to the linear's node, whose dX = G W runs with
// beta = 1 into it: the sum in the GEMM's float32 epilogue, no separate pass. The
// result is the same sum of the same float32 values up to the order of one
// addition (tests/autograd/test_linear_gelu_fused.cpp). LOCKSTEP_BF16_LINEAR_SUM_DX=0
// turns it off (A/B runs).
//
// CUDA tensors take the same nodes' GPU form: autocast_ops_cuda.cpp (Note
// [Autocast on CUDA] in core/cuda/autocast_kernels.cu).
//
// Read before: autograd/functions/autocast_ops.h, core/native/gemm_bf16.h,
// core/native/conv_bf16.h. Read next: autograd/functions/autocast_ops_cuda.cpp.
#include "autograd/functions/autocast_ops.h"
#include "autograd/functions/autocast_fused_dropout.h"

#include <algorithm>
#include <cstring>

#include "autograd/functions/functions.h"
#include "autograd/functions/linear_autocast_saved.h"
#include "autograd/recompute_backward.h"
#include "autograd/traffic.h"
#include "core/cuda_hooks.h"
#include "core/env_flag.h"
#include "core/grad_mode.h"
#include "core/nn_ops.h"
#include "core/native/conv_bf16.h"
#include "core/native/fused_dropout.h"
#include "core/native/gemm_bf16.h"
#include "core/native/linear_rules.h"
#include "core/native/nn_kernels.h"
#include "core/profiler.h"

namespace lockstep::autograd {

namespace {

// CPU tensors, and CUDA ones in a CUDA build (Note [Autocast on CUDA]).
bool eligible(const Tensor& t) {
  const bool on_device = t.device().is_cpu() || t.device().is_cuda();
  return t.defined() && t.is_floating_point() && t.dtype() != kFloat64 && on_device;
}

// With LOCKSTEP_BF16_PACK_WEIGHTS=1, a parameter's bf16 copy is handed to the
// GEMM as a weight, packed once per version (Note [bf16 weights packed once per
// step] in core/native/gemm_bf16.cpp: off by default until it is shown to pay);
// other tensors (activations, views) always as they are.
native::Bf16Weight weight_key(const Tensor& weight) {
  static const bool pack = env_flag("LOCKSTEP_BF16_PACK_WEIGHTS", false);
  if (!pack || !weight.is_leaf()) return {};
  return {weight.impl()->storage, weight.impl()->storage->version()};
}

const native::Bf16Weight* or_null(const native::Bf16Weight& w) {
  return w.owner != nullptr ? &w : nullptr;
}

// A dtype conversion as its own profiler row (Note [Profiler bytes]): a pass
// over memory inside the op, not part of its GEMM.
Tensor cast_pass(const Tensor& t, ScalarType dtype) {
  if (!t.defined() || t.dtype() == dtype) return t;
  profiler::Scope prof("autocast.cast");
  Tensor cast = native::to_dtype(t, dtype);
  profiler::add_bytes(distinct_bytes(t) + distinct_bytes(cast));
  return cast;
}

// A gradient computed in float32 for an input of `dtype`.
Tensor as_input_dtype(const Tensor& g, ScalarType dtype) { return cast_pass(g, dtype); }

struct LinearAutocastBackward final : BackwardNode, LinearAutocastSaved {
  native::Bf16Weight weight_packed;  // W's identity and version at the forward
  SavedVariable pre_gelu;            // linear_gelu_autocast: u = x W^T + b (*, out) bf16
  bool gelu = false;
  bool dropout = false;              // Note [linear + GELU + dropout in one node]
  native::DropoutKey dropout_key;    // its mask
  std::string name() const override {
    if (!gelu) return "LinearAutocastBackward";
    return dropout ? "LinearGeluDropoutAutocastBackward" : "LinearGeluAutocastBackward";
  }

  variable_list apply(variable_list&& grads) override {
    if (GradMode::is_enabled()) return recorded(grads[0]);  // create_graph, plain linear only
    return run(grads[0], Tensor());
  }

  // Note [Double backward by recomputation]: a float32 linear re-run outside autocast on
  // the bf16 values it saved (widened), each joined to its input's edge; the incoming
  // gradient rounded to bf16 first, as the fast path does. Its products are the fast
  // path's (bf16 values, float32 sums). The values of the bias, and of an operand not
  // saved because the other needs no gradient, do not change the gradients: zeros stand
  // in. The fused GELU forms still refuse.
  bool supports_double_backward() const override { return !gelu; }
  variable_list recorded(const Tensor& grad) {
    const Tensor x16 = input16.unpack(name()), w16 = weight16.unpack(name());
    const int64_t out = grad.size(-1), in = x16.defined() ? x16.size(-1) : w16.size(1);
    IntList x_sizes = grad.sizes();
    x_sizes.back() = in;
    const Tensor x = x16.defined() ? native::to_dtype(x16, kFloat32) : native::zeros(x_sizes);
    const Tensor w = w16.defined() ? native::to_dtype(w16, kFloat32) : native::zeros({out, in});
    const std::vector<Tensor> inputs{with_history(x, next_edges()[0], input_dtype),
                                     with_history(w, next_edges()[1], weight_dtype),
                                     with_history(native::zeros({out}), next_edges()[2], bias_dtype)};
    const auto reference = [](const std::vector<Tensor>& v) {
      AutocastGuard off(kBFloat16, /*enabled=*/false);
      return std::vector<Tensor>{lockstep::linear(v[0], v[1], v[2])};
    };
    const Tensor g = grad.dtype() == kBFloat16 ? grad.to(kFloat32) : grad.to(kBFloat16).to(kFloat32);
    variable_list grads = recorded_gradients(name(), inputs, reference, {g});
    const ScalarType dtypes[3] = {input_dtype, weight_dtype, bias_dtype};
    for (size_t i = 0; i < grads.size(); ++i) {
      if (grads[i].defined() && grads[i].dtype() != dtypes[i]) grads[i] = grads[i].to(dtypes[i]);
    }
    return grads;
  }

  // Note [linear's input gradient summed in place].
  bool sums_into_pending(size_t input_nr) const override {
    static const bool on = env_flag("LOCKSTEP_BF16_LINEAR_SUM_DX", true);
    return on && input_nr == 0 && input_dtype == kFloat32;
  }
  variable_list apply_summing(variable_list&& grads, variable_list&& pending) override {
    const Tensor sum = pending.empty() ? Tensor() : pending[0];
    if (!should_compute_output(0) || !sum.defined() || sum.dtype() != kFloat32 ||
        !sum.device().is_cpu() || !sum.is_contiguous()) {
      return BackwardNode::apply_summing(std::move(grads), std::move(pending));
    }
    return run(grads[0], sum);
  }

  // The three gradients; dx added into sum_into (float32, dx's shape) when that is defined.
  variable_list run(const Tensor& grad, const Tensor& sum_into) {
    // Note [linear + GELU in one node]: dL/du = GeluBackward's formula (after
    // DropoutBackward's: Note [linear + GELU + dropout in one node]), then as linear.
    Tensor gy = grad;
    if (gelu) {
      const Tensor u = pre_gelu.unpack(name());
      gy = dropout ? native::gelu_dropout_backward(grad, u, dropout_key)
                   : native::gelu_backward(grad, u);
    }
    const Tensor g = native::contiguous(cast_pass(gy, kBFloat16));  // (*, out)
    const int64_t out = g.size(-1), m = g.numel() / std::max<int64_t>(out, 1);
    Tensor dx, dw, db;
    if (should_compute_output(0)) {
      const Tensor w = weight16.unpack(name());  // (out, in)
      const int64_t in = w.size(1);
      IntList sizes = g.sizes();
      sizes.back() = in;
      const bool summing = sum_into.defined() && sum_into.sizes() == sizes;
      dx = summing ? sum_into : native::empty(sizes, input_dtype);  // (*, in)
      dispatch_all(input_dtype, [&]<class T>() {
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, BFloat16>) {
          native::gemm_bf16<T>(false, false, m, in, out, g.data_ptr<BFloat16>(), out,
                               w.data_ptr<BFloat16>(), in, summing ? 1.0f : 0.0f, dx.data_ptr<T>(),
                               in, nullptr, or_null(weight_packed));
        }
      });
      if (sum_into.defined() && !summing) dx = native::add(sum_into, dx);  // never dropped
    }
    if (should_compute_output(1)) {
      const Tensor x = native::contiguous(input16.unpack(name()));  // (*, in)
      const int64_t in = x.size(-1);
      dw = native::empty({out, in}, kFloat32);  // (out, in) = G^T (out, M) X (M, in)
      native::gemm_bf16<float>(true, false, out, in, m, g.data_ptr<BFloat16>(), out,
                               x.data_ptr<BFloat16>(), in, 0.0f, dw.data_ptr<float>(), in);
      dw = as_input_dtype(dw, weight_dtype);
    }
    if (should_compute_output(2)) {
      db = native::sum_rows_to_float(native::reshape(g, {m, out}));  // (out), summed in double
      db = as_input_dtype(db, bias_dtype);
    }
    return {dx, dw, db};
  }
  void release_variables() override {
    reset_saved();
    pre_gelu.reset();
    weight_packed = {};
  }
};

struct Conv2dAutocastBackward final : BackwardNode {
  native::ConvBf16SavedInput input16;  // the forward's own reordered copy (conv_bf16.h)
  SavedVariable input;                 // instead, when the kernel kept the input itself
  SavedVariable weight16;
  native::ConvGeometry geometry{};
  ScalarType input_dtype = kFloat32, weight_dtype = kFloat32, bias_dtype = kFloat32;
  std::string name() const override { return "Conv2dAutocastBackward"; }

  variable_list apply(variable_list&& grads) override { return run(grads[0], Tensor()); }

  // Note [bf16 convolution gradients summed in place] (core/native/conv_bf16.h).
  bool sums_into_pending(size_t input_nr) const override { return input_nr == 0; }
  variable_list apply_summing(variable_list&& grads, variable_list&& pending) override {
    if (!should_compute_output(0) ||
        !native::conv_bf16_can_sum_into(geometry, grads[0], pending[0], input_dtype)) {
      return BackwardNode::apply_summing(std::move(grads), std::move(pending));
    }
    return run(grads[0], pending[0]);
  }

  // The three gradients; dx added into sum_into when that is defined.
  variable_list run(const Tensor& gy, const Tensor& sum_into) {
    const bool need_x = should_compute_output(0), need_w = should_compute_output(1);
    native::ConvBf16SavedInput saved = input16;
    if (input16.aliases_input) saved.plain = input.unpack(name());
    auto [dx, dw, db] = native::conv2d_bf16_backward(
        geometry, gy, saved, need_x ? weight16.unpack(name()) : Tensor(), input_dtype, need_x,
        need_w, should_compute_output(2), sum_into);
    return {dx, as_input_dtype(dw, weight_dtype), as_input_dtype(db, bias_dtype)};
  }
  void release_variables() override {
    input16 = {};
    input.reset();
    weight16.reset();
  }
};

}  // namespace

bool autocast_applies(std::initializer_list<const Tensor*> operands) {
  if (!is_autocast_enabled()) return false;
  for (const Tensor* t : operands) {
    if (t->defined() && !eligible(*t)) return false;
  }
  // Operands on two devices: the plain op reports it (its device check names both).
  const Tensor* first = nullptr;
  for (const Tensor* t : operands) {
    if (!t->defined()) continue;
    if (first != nullptr && t->device() != first->device()) return false;
    first = t;
  }
  return true;
}

Tensor float_input(const Tensor& t) {
  return is_autocast_enabled() && t.defined() && t.dtype() == kBFloat16 ? t.to(kFloat32) : t;
}

bool reads_bf16_in_place(const Tensor& t) {
  static const bool on = env_flag("LOCKSTEP_BF16_FUSED_CASTS", true);
  return on && is_autocast_enabled() && t.defined() && t.dtype() == kBFloat16 &&
         t.device().is_cpu();
}

Tensor bf16_input(const Tensor& t) {
  return autocast::needs_cast(t, autocast_dtype()) && eligible(t) ? t.to(autocast_dtype()) : t;
}

namespace {

// linear_autocast, with `gelu` linear_gelu_autocast (Note [linear + GELU in one node]),
// with p > 0 as well linear_gelu_dropout_autocast (Note [linear + GELU + dropout in one node]).
Tensor linear_autocast_impl(const Tensor& input, const Tensor& weight, const Tensor& bias,
                            bool gelu, double p = 0.0) {
  if (input.defined() && input.device().is_cuda()) {
    const Tensor y = lockstep::detail::cuda_hooks<AutocastCudaHooks>("linear under autocast").linear(input, weight, bias);
    return gelu ? y.gelu() : y;
  }
  profiler::Scope prof(!gelu      ? "linear_bf16"
                       : p > 0.0 ? "linear_gelu_dropout_bf16"
                                 : "linear_gelu_bf16");
  LS_CHECK(input.defined() && weight.defined(), "linear: input and weight must be defined tensors");
  const Tensor x16 = native::contiguous(autocast::cached_cast(input, kBFloat16));   // (*, in)
  const Tensor w16 = native::contiguous(autocast::cached_cast(weight, kBFloat16));  // (out, in)
  const Tensor b16 = autocast::cached_cast(bias, kBFloat16);                        // (out)
  native::rules::check_linear(
      x16, w16, b16, [] {}, [](ScalarType t) { return t == kBFloat16; },
      ") must be floating tensors under autocast");
  const int64_t in = w16.size(1), out = w16.size(0), m = x16.numel() / std::max<int64_t>(in, 1);
  IntList sizes = input.sizes();
  sizes.back() = out;
  Tensor y = native::empty(sizes, kBFloat16);  // (*, out)
  const Tensor b =
      bias.defined() ? native::contiguous(b16) : Tensor();  // (out), added in the GEMM's sum
  // See Note [linear's weight as a transposed operand].
  static const bool copy_transposed = env_flag("LOCKSTEP_BF16_LINEAR_WT_COPY", false);
  // B: W16 (out, in) read transposed, or its transposed copy (in, out) read as it is.
  const Tensor wb = copy_transposed ? autocast::cached_cast_transposed(weight, kBFloat16) : w16;
  const native::Bf16Weight packed = weight_key(weight);
  native::gemm_bf16<BFloat16>(false, !copy_transposed, m, out, in, x16.data_ptr<BFloat16>(), in,
                              wb.data_ptr<BFloat16>(), copy_transposed ? out : in, 0.0f,
                              y.data_ptr<BFloat16>(), out,
                              b.defined() ? b.data_ptr<BFloat16>() : nullptr, or_null(packed));
  // The GELU's pass over the GEMM's output, the kernel Tensor::gelu runs, or with the
  // dropout's mask applied in the same pass (its key drawn where dropout draws it).
  const native::DropoutKey key = p > 0.0 ? native::draw_dropout_key(p) : native::DropoutKey{};
  const Tensor act = !gelu    ? y
                     : p > 0.0 ? native::gelu_dropout_forward(y, key)
                               : native::unary(native::UnaryOp::Gelu, y);
  if (compute_requires_grad({input, weight, bias})) {
    auto node = std::make_shared<LinearAutocastBackward>();
    node->save(input, weight, bias, x16, w16);
    node->weight_packed = packed;
    node->gelu = gelu;
    node->dropout = gelu && p > 0.0;
    node->dropout_key = key;
    if (gelu) node->pre_gelu = SavedVariable(y);
    record(node, {input, weight, bias}, {act});
  }
  return act;
}

}  // namespace

Tensor linear_autocast(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  return linear_autocast_impl(input, weight, bias, /*gelu=*/false);
}

Tensor linear_gelu_autocast(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  return linear_autocast_impl(input, weight, bias, /*gelu=*/true);
}

Tensor linear_gelu_dropout_autocast(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                    double p) {
  LS_CHECK(p > 0.0 && p <= 1.0, "linear_gelu_dropout_autocast: dropout probability has to be in "
           "(0, 1] (p == 0 is linear_gelu_autocast), but got ", p);
  LS_CHECK(!input.defined() || input.device().is_cpu(), "linear_gelu_dropout_autocast: takes CPU "
           "tensors (check fuses_linear_gelu_dropout first), got ", input.device().str());
  return linear_autocast_impl(input, weight, bias, /*gelu=*/true, p);
}

bool fuses_dropout_cast(const Tensor& probs) {
  static const bool on = env_flag("LOCKSTEP_BF16_DROPOUT_CAST", true);
  return on && is_autocast_enabled() && autocast_dtype() == kBFloat16 && probs.defined() &&
         probs.dtype() == kFloat32 && probs.device().is_cpu();
}

bool fuses_linear_gelu(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  static const bool on = env_flag("LOCKSTEP_BF16_LINEAR_GELU", true);
  return on && input.defined() && input.device().is_cpu() &&
         autocast_applies({&input, &weight, &bias});
}

bool fuses_linear_gelu_dropout(const Tensor& input, const Tensor& weight, const Tensor& bias,
                               double p, bool training) {
  static const bool on = env_flag("LOCKSTEP_BF16_GELU_DROPOUT", true);
  return on && training && p > 0.0 && p <= 1.0 && autocast_dtype() == kBFloat16 &&
         fuses_linear_gelu(input, weight, bias);
}


Tensor conv2d_autocast(const Tensor& input, const Tensor& weight, const Tensor& bias,
                       const IntList& stride, const IntList& padding, const IntList& dilation,
                       int64_t groups) {
  if (input.defined() && input.device().is_cuda()) {
    return lockstep::detail::cuda_hooks<AutocastCudaHooks>("conv2d under autocast")
        .conv2d(input, weight, bias, stride, padding, dilation, groups);
  }
  profiler::Scope prof("conv2d_bf16");
  LS_CHECK(input.defined() && weight.defined(), "conv2d: input and weight must be defined tensors");
  // float32 and bf16 inputs go to the kernel as they are (it converts while it
  // reorders); float16 is converted first.
  const bool direct = input.dtype() == kFloat32 || input.dtype() == kBFloat16;
  const Tensor x = direct ? input : cast_pass(input, kBFloat16);
  const Tensor w16 = autocast::cached_cast(weight, kBFloat16);
  const Tensor b32 = bias.defined() ? native::to_dtype(bias, kFloat32) : bias;
  // The shape checks of conv2d, on operands of x's dtype.
  const native::ConvGeometry g = native::make_conv_geometry(
      x, autocast::cached_cast(weight, x.dtype()), autocast::cached_cast(bias, x.dtype()), stride,
      padding, dilation, groups, "conv2d");
  // The weight and bias gradients read the input: keep the kernel's copy of it.
  const bool keep_input = GradMode::is_enabled() &&
                          (weight.requires_grad() || (bias.defined() && bias.requires_grad()));
  native::ConvBf16SavedInput saved;
  Tensor y = native::conv2d_bf16_forward(g, x, w16, b32, keep_input ? &saved : nullptr);
  if (compute_requires_grad({input, weight, bias})) {
    auto node = std::make_shared<Conv2dAutocastBackward>();
    node->geometry = g;
    node->input_dtype = input.dtype();
    node->weight_dtype = weight.dtype();
    node->bias_dtype = bias.defined() ? bias.dtype() : kFloat32;
    if (saved.aliases_input) {  // the caller's tensor: saved with a version check
      node->input = SavedVariable(saved.plain);
      saved.plain = Tensor();
    }
    node->input16 = std::move(saved);
    if (input.requires_grad()) node->weight16 = SavedVariable(w16);
    record(node, {input, weight, bias}, {y});
  }
  return y;
}

}  // namespace lockstep::autograd
