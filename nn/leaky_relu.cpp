// nn/leaky_relu.cpp — leaky_relu on a float32 CPU tensor as one op with one
// backward node, LeakyReluBackward; every other tensor takes
// leaky_relu_reference (nn/activation.h), the composed definition.
//
// Why: the reference records gt, mul and where, and its backward runs where
// twice against a broadcast zero and a scalar multiply: about a fifth of a DCGAN
// step on the CPU, whose discriminator runs three LeakyReLUs a pass
// (docs/results/examples.md). Fused, the forward is one pass over x and the
// backward one pass over (g, x). LeakyReluBackward saves the input x:
// grad_x = g where x > 0, else g * slope (slope at 0 and for NaN, as the
// reference and PyTorch). Under create_graph it records g times the constant
// factor (1 where x > 0, else slope), so the second derivative is 0, as the
// reference's. tests/nn/test_layers_extra.cpp checks both paths against the
// reference bit for bit.
// Read before: nn/activation.h, autograd/functions/add_relu.cpp. Read next: nn/pooling.h.
#include "autograd/functions/functions.h"
#include "core/factory.h"
#include "core/profiler.h"
#include "nn/activation.h"

namespace lockstep::nn {
namespace {

// x, v: contiguous float32 CPU of one shape. out[i] = x[i] > 0 ? v[i] : v[i] * slope:
// with v = x the forward, with v = the output's gradient the backward.
Tensor leaky_relu_kernel(const Tensor& x, const Tensor& v, float slope) {
  Tensor out = empty(x.sizes(), TensorOptions().dtype(kFloat32));
  const float* in = x.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const int64_t n = x.numel();
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = in[i] > 0.0f ? vp[i] : vp[i] * slope;
  return out;
}

struct LeakyReluBackward final : autograd::DoubleBackwardNode {
  autograd::SavedVariable input;  // contiguous float32 CPU
  float slope = 0.01f;
  std::string name() const override { return "LeakyReluBackward"; }

  autograd::variable_list apply(autograd::variable_list&& grads) override {
    const Tensor x = input.unpack(name());
    const Tensor g = grads[0].contiguous();
    if (autograd::grad_ops::recording()) {  // g times a constant: see the header
      return {g * leaky_relu_kernel(x, ones_like(x), slope)};
    }
    return {leaky_relu_kernel(x, g, slope)};
  }
  void release_variables() override { input.reset(); }
};

}  // namespace

Tensor leaky_relu(const Tensor& x_in, double negative_slope) {
  if (!x_in.defined() || !x_in.device().is_cpu() || x_in.dtype() != kFloat32) {
    return leaky_relu_reference(x_in, negative_slope);
  }
  profiler::Scope prof("leaky_relu");
  const Tensor x = x_in.contiguous();
  // The reference multiplies float32 by the scalar rounded to float32, as PyTorch does.
  const auto slope = static_cast<float>(negative_slope);
  Tensor out = leaky_relu_kernel(x, x, slope);
  if (autograd::compute_requires_grad({x})) {
    auto node = std::make_shared<LeakyReluBackward>();
    node->input = autograd::SavedVariable(x);
    node->slope = slope;
    autograd::record(node, {x}, {out});
  }
  return out;
}

}  // namespace lockstep::nn
