// tests/autograd/test_batch_norm_relu_pool_op.cpp — batch_norm_relu_max_pool2d, the op a
// ResNet's stem ends in (Note [Stem batch norm, ReLU and max-pool in one pass] in
// core/native/fast/batch_norm_relu_pool_bf16_nhwc.cpp): in float64 the same values, three
// gradients and running statistics as max_pool2d(batch_norm_relu(x)), in training and eval;
// gradcheck and gradgradcheck; on channels-last bf16 the kernel's gradients through the node,
// and the bytes the profiler counts for it (the batch norm's output and its gradient, which
// the reference, LOCKSTEP_BF16_BN_POOL=0, writes and reads back, counted there only); errors.
// Read before: autograd/functions/batch_norm_relu_pool.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "autograd/node.h"
#include "core/factory.h"
#include "core/native/batch_norm_relu_pool.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/nn_ops.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "tests/support/gradcheck.h"
#include "tests/support/profiler_rows.h"

namespace ls = lockstep;
namespace nv = lockstep::native;
using ls::Tensor;
using ls::testing::randn64;
using Inputs = std::vector<Tensor>;

namespace {

Tensor stem_op(const Inputs& v, const Tensor& rm, const Tensor& rv, bool training) {
  return ls::batch_norm_relu_max_pool2d(v[0], v[1], v[2], rm, rv, training, 0.1, 1e-5, {3, 3},
                                        {2, 2}, {1, 1});
}

// Whether the op runs the reference, the two ops in turn (LOCKSTEP_BF16_BN_POOL=0).
bool reference_on() {
  const char* v = std::getenv("LOCKSTEP_BF16_BN_POOL");
  return v != nullptr && std::string(v) == "0";
}

}  // namespace

TEST_CASE("batch_norm_relu_max_pool2d matches max_pool2d(batch_norm_relu(x)) in float64") {
  ls::manual_seed(71);
  for (bool training : {true, false}) {
    CAPTURE(training);
    const Inputs init = {randn64({3, 4, 7, 6}), randn64({4}), randn64({4})};
    const Tensor gy = randn64({3, 4, 4, 3});
    std::vector<std::vector<double>> grads[2], stats[2];
    std::vector<double> outs[2];
    for (int fused = 0; fused < 2; ++fused) {
      Inputs v;
      for (const Tensor& t : init) v.push_back(t.clone().requires_grad_(true));
      const Tensor rm = ls::zeros({4}, ls::kFloat64) + 0.25;
      const Tensor rv = ls::ones({4}, ls::kFloat64) * 1.5;
      const Tensor y =
          fused ? stem_op(v, rm, rv, training)
                : ls::max_pool2d(ls::batch_norm_relu(v[0], v[1], v[2], rm, rv, training, 0.1, 1e-5),
                                 {3, 3}, {2, 2}, {1, 1});
      REQUIRE(y.grad_fn() != nullptr);
      CHECK(y.grad_fn()->name() ==
            (fused ? "BatchNormReluMaxPool2dBackward" : "MaxPool2dBackward"));
      (y * gy).sum().backward();
      outs[fused] = y.to_vector<double>();
      for (const Tensor& t : v) grads[fused].push_back(t.grad().to_vector<double>());
      stats[fused] = {rm.to_vector<double>(), rv.to_vector<double>()};
    }
    CHECK(outs[1] == outs[0]);
    for (size_t k = 0; k < 3; ++k) {
      CAPTURE(k);
      CHECK(grads[1][k] == grads[0][k]);
    }
    CHECK(stats[1] == stats[0]);
  }
}

TEST_CASE("batch_norm_relu_max_pool2d: gradcheck and gradgradcheck, training and eval") {
  ls::manual_seed(72);
  for (bool training : {true, false}) {
    CAPTURE(training);
    const Tensor rm = randn64({2}),
                 rv = ls::rand({2}, ls::TensorOptions().dtype(ls::kFloat64)) + 0.5;
    for (int attempt = 0;; ++attempt) {  // inputs off the ReLU's kink, without ties in a window
      REQUIRE(attempt < 200);
      const Inputs v = {randn64({2, 2, 3, 4}), randn64({2}), randn64({2})};
      const Tensor pre =
          ls::batch_norm(v[0], v[1], v[2], rm.clone(), rv.clone(), training, 0.1, 1e-5);
      const std::vector<double> values = pre.to_vector<double>();  // 4 planes of 12
      bool ok = true;
      for (double p : values) ok &= std::abs(p) >= 0.05;
      for (size_t i = 0; i < values.size() && ok; ++i) {  // no two positive values of a plane tie
        for (size_t j = i + 1; j < values.size() && j / 12 == i / 12; ++j) {
          ok &= values[i] < 0 || values[j] < 0 || std::abs(values[i] - values[j]) >= 0.02;
        }
      }
      if (!ok) continue;
      auto f = [&](const Inputs& p) {
        return stem_op(p, rm.clone(), rv.clone(), training).pow(2.0);
      };
      CHECK_GRADCHECK(f, v);
      CHECK_GRADGRADCHECK(f, v);
      break;
    }
  }
}

TEST_CASE(
    "batch_norm_relu_max_pool2d on channels-last bf16: the kernel's gradients and the bytes") {
  const int64_t c = 24;
  const ls::IntList shape{2, c, 10, 10};
  ls::manual_seed(73);
  Inputs v = {nv::channels_last(nv::to_dtype(ls::randn(shape) * 1.5 + 0.2, ls::kBFloat16)),
              ls::randn({c}), ls::randn({c})};
  for (Tensor& t : v) t.requires_grad_(true);
  const Tensor gy = nv::channels_last(nv::to_dtype(ls::randn({2, c, 5, 5}), ls::kBFloat16));
  ls::profiler::reset();
  ls::profiler::enable();
  const Tensor out = stem_op(v, ls::zeros({c}), ls::ones({c}), true);
  out.backward(gy);
  ls::profiler::disable();
  CHECK(nv::is_channels_last(out));
  // The kernels called directly.
  const nv::BatchNormReluPoolForward f = nv::batch_norm_relu_max_pool2d_forward(
      v[0].detach(), {v[1].detach(), v[2].detach(), ls::zeros({c}), ls::ones({c})}, true, 0.1, 1e-5,
      {3, 3}, {2, 2}, {1, 1});
  CHECK(f.argmax.dtype() == (reference_on() ? ls::kInt64 : ls::kUInt8));
  const std::array<Tensor, 3> d = nv::batch_norm_relu_max_pool2d_backward(
      gy, v[0].detach(), v[1].detach(), v[2].detach(), f.save_mean, f.save_invstd, f.argmax, {3, 3},
      {2, 2}, {1, 1}, true, {true, true, true});
  CHECK(ls::equal(nv::to_dtype(out.detach(), ls::kFloat32), nv::to_dtype(f.output, ls::kFloat32)));
  for (size_t k = 0; k < 3; ++k) {
    CAPTURE(k);
    CHECK(ls::equal(nv::to_dtype(v[k].grad(), ls::kFloat32), nv::to_dtype(d[k], ls::kFloat32)));
  }
  const int64_t a = 2 * c * 10 * 10 * 2, o = 2 * c * 5 * 5 * 2;  // bf16 input, output
  const int64_t argmax = reference_on() ? 4 * o : o / 2;         // int64 indices, or bytes
  const auto entries = ls::profiler::entries();
  const auto* fwd = ls::testing::find_entry(entries, "batch_norm_relu_max_pool2d");
  const auto* bwd = ls::testing::find_entry(entries, "BatchNormReluMaxPool2dBackward");
  REQUIRE(fwd != nullptr);
  REQUIRE(bwd != nullptr);
  // The reference also writes relu(bn(x)) and reads it back, and its gradient in backward.
  const int64_t between = reference_on() ? 2 * a : 0;
  // forward: x and two (C) parameters read; the output and the argmax written
  CHECK(fwd->self_mb == doctest::Approx((a + 2 * 4 * c + o + argmax + between) * 1e-6));
  // backward: g, x, the weight and bias, mean and invstd, the argmax read; dx and two (C)
  // gradients written
  CHECK(bwd->self_mb == doctest::Approx((o + 2 * a + 6 * 4 * c + argmax + 2 * a) * 1e-6));
}

TEST_CASE("batch_norm_relu_max_pool2d: errors name the op") {
  CHECK_THROWS_WITH(
      ls::batch_norm_relu_max_pool2d(ls::randn({2, 3, 4, 4}), ls::randn({3}), ls::randn({3}),
                                     Tensor(), Tensor(), true, 0.1, 1e-5, {3, 3}, {2, 2}, {2, 2}),
      doctest::Contains("batch_norm_relu_max_pool2d: padding"));
}

TEST_CASE(
    "batch_norm_relu_max_pool2d: bf16 in NCHW order and float32 channels-last take the reference") {
  ls::manual_seed(74);
  const int64_t c = 8;
  for (bool channels_last : {false, true}) {
    CAPTURE(channels_last);
    // bf16 NCHW (not the kernel's order), or float32 channels-last (not its dtype)
    Tensor x = channels_last ? nv::channels_last(ls::randn({2, c, 9, 7}))
                             : nv::to_dtype(ls::randn({2, c, 9, 7}), ls::kBFloat16);
    Inputs v = {x, ls::randn({c}), ls::randn({c})};
    Inputs ref = {x.clone(), v[1].clone(), v[2].clone()};
    for (Tensor& t : v) t.requires_grad_(true);
    for (Tensor& t : ref) t.requires_grad_(true);
    const Tensor out = stem_op(v, ls::zeros({c}), ls::ones({c}), true);
    const Tensor expected = ls::max_pool2d(
        ls::batch_norm_relu(ref[0], ref[1], ref[2], ls::zeros({c}), ls::ones({c}), true, 0.1, 1e-5),
        {3, 3}, {2, 2}, {1, 1});
    CHECK(ls::equal(nv::to_dtype(out.detach(), ls::kFloat32),
                    nv::to_dtype(expected.detach(), ls::kFloat32)));
    const Tensor g = nv::to_dtype(ls::randn(out.sizes()), out.dtype());
    out.backward(g);
    expected.backward(g);
    for (size_t k = 0; k < 3; ++k) {
      CAPTURE(k);
      CHECK(ls::equal(nv::to_dtype(v[k].grad(), ls::kFloat32),
                      nv::to_dtype(ref[k].grad(), ls::kFloat32)));
    }
  }
}
