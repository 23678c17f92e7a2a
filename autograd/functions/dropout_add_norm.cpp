// autograd/functions/dropout_add_norm.cpp — layer_norm(x + dropout(y)) as one op, as
// Note [dropout + residual add + LayerNorm in one pass] describes
// (autograd/functions/autocast_fused_dropout.h).
//
// DropoutAddLayerNormBackward saves what LayerNormBackward saved (the normalised
// input h, the weight, the row statistics) and the dropout's key instead of its
// mask; one pass over the rows returns dL/dx = dL/dh (layer_norm_backward's dx) and
// dL/dy, the dropout_add backward of it in bf16. Its edges are (x, y, weight, bias):
// the LayerNorm's parameters are handed their gradients when LayerNormBackward would
// have handed them, so the order in which parameters' gradients become ready (which
// DDP's buckets follow) is unchanged. The forward also writes its output's bf16 copy,
// which the next linear takes instead of converting (Note [bf16 copies written by the op
// that made the activation] in core/autocast_offer.h); LOCKSTEP_BF16_NORM_WRITES_CAST=0 leaves
// the conversion to the linear (A/B runs).
//
// Read before: autograd/functions/dropout.cpp, autograd/functions/layer_norm.cpp,
// core/native/fused_dropout.cpp. Read next: nn/transformer.cpp.
#include "autograd/functions/autocast_fused_dropout.h"
#include "autograd/functions/autocast_ops.h"
#include "autograd/functions/functions.h"
#include "autograd/traffic.h"
#include "core/autocast.h"
#include "core/autocast_offer.h"
#include "core/env_flag.h"
#include "core/native/fused_dropout.h"
#include "core/profiler.h"

namespace lockstep::autograd {
namespace {

struct DropoutAddLayerNormBackward final : BackwardNode {
  SavedVariable h, weight, mean, rstd;  // h = x + dropout(y) (*, D) f32; mean, rstd (M)
  IntList normalized_shape;
  native::DropoutKey key;  // the dropout's mask (Note [dropout masks kept as keys])
  std::string name() const override { return "DropoutAddLayerNormBackward"; }
  variable_list apply(variable_list&& grads) override {
    auto [dx, dy, dw, db] = native::dropout_add_layer_norm_backward(
        grads[0], h.unpack(name()), normalized_shape, mean.unpack(name()), rstd.unpack(name()),
        weight.unpack(name()), key, should_compute_output(0), should_compute_output(1),
        should_compute_output(2), should_compute_output(3));
    return {dx, dy, dw, db};
  }
  void release_variables() override {
    h.reset();
    weight.reset();
    mean.reset();
    rstd.reset();
  }
};

bool float32_cpu_or_undefined(const Tensor& t) {
  return !t.defined() || (t.dtype() == kFloat32 && t.device().is_cpu());
}

}  // namespace

bool fuses_dropout_add_layer_norm(const Tensor& x, const Tensor& y, double p, bool training,
                                  const Tensor& weight, const Tensor& bias) {
  static const bool on = env_flag("LOCKSTEP_BF16_DROPOUT_ADD_NORM", true);
  return on && fuses_dropout_add(x, y, p, training) && float32_cpu_or_undefined(weight) &&
         float32_cpu_or_undefined(bias);
}

Tensor dropout_add_layer_norm(const Tensor& x, const Tensor& y, double p,
                              const IntList& normalized_shape, const Tensor& weight,
                              const Tensor& bias, double eps) {
  profiler::Scope prof("dropout_add_layer_norm");
  static const bool write_bf16 = env_flag("LOCKSTEP_BF16_NORM_WRITES_CAST", true);
  native::DropoutAddNorm r = native::dropout_add_layer_norm_forward(
      x, y, p, normalized_shape, weight, bias, eps, write_bf16 && is_autocast_enabled());
  // h is written for backward besides the result, and out's bf16 copy for the next
  // linear (Note [bf16 copies written by the op that made the activation]).
  profiler::add_bytes(distinct_bytes(r.h) + distinct_bytes(r.out16));
  autocast::offer_cast(r.out, r.out16);
  if (compute_requires_grad({x, y, weight, bias})) {
    auto node = std::make_shared<DropoutAddLayerNormBackward>();
    node->h = SavedVariable(r.h);
    node->weight = SavedVariable(weight);  // undefined without affine parameters
    node->mean = SavedVariable(r.mean);
    node->rstd = SavedVariable(r.rstd);
    node->normalized_shape = normalized_shape;
    node->key = r.key;
    record(node, {x, y, weight, bias}, {r.out});
  }
  return r.out;
}

}  // namespace lockstep::autograd
