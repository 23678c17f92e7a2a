// tests/autograd/test_bf16_in_place_ops.cpp — Note [float32 ops reading bfloat16 in
// place]: under bf16 autocast, softmax, log_softmax and cross_entropy read their bf16
// input without a float32 copy and return its gradient in bf16. The reference is the
// policy written out: op(x.to(kFloat32)) outside autocast, whose ToCopyBackward rounds
// the float32 gradient. Same float32 arithmetic on the same values, so values and
// gradients must agree bit for bit (tolerance 0), and the graph has no ToCopyBackward.
// Read before: autograd/functions/autocast_ops.h.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/functions/autocast_ops.h"
#include "autograd/node.h"
#include "core/autocast.h"
#include "core/factory.h"
#include "core/native/native.h"
#include "core/nn_ops.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace ls = lockstep;
namespace nv = lockstep::native;

namespace {

// A bf16 leaf with values spread wide enough that softmax rows are not flat.
ls::Tensor bf16_leaf(const ls::IntList& shape, double scale) {
  ls::Tensor x = (ls::randn(shape) * scale).to(ls::kBFloat16);
  x.requires_grad_(true);
  return x;
}

// out.grad_fn() reads x directly: no cast node between them.
bool reads_leaf_directly(const ls::Tensor& out) {
  if (out.grad_fn() == nullptr || out.grad_fn()->next_edges().size() != 1) return false;
  return out.grad_fn()->next_edges()[0].function->name() == "AccumulateGrad";
}

// The in-place op under autocast against the cast written out: values and bf16 gradient.
template <class Op>
void check_against_cast(const ls::Tensor& x, Op op, const std::string& node) {
  ls::Tensor g = ls::randn(x.sizes());  // float32 upstream gradient, as the float32 op returns
  ls::Tensor ref_x = x.detach();
  ref_x.requires_grad_(true);
  const ls::Tensor ref = op(ref_x.to(ls::kFloat32));
  ref.backward(ref.dim() == 0 ? ls::Tensor() : g);

  ls::Tensor out;
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    out = op(x);
  }
  REQUIRE(out.grad_fn() != nullptr);
  CHECK(out.grad_fn()->name() == node);
  CHECK(reads_leaf_directly(out));
  CHECK(out.dtype() == ls::kFloat32);
  CHECK(nv::equal(out.detach(), ref.detach()));
  out.backward(out.dim() == 0 ? ls::Tensor() : g);
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dtype() == ls::kBFloat16);
  CHECK(nv::equal(x.grad(), ref_x.grad()));
}

}  // namespace

TEST_CASE("bf16 in place: softmax and log_softmax equal the cast, values and gradients") {
  ls::manual_seed(44);
  ls::Tensor s = bf16_leaf({2, 3, 8, 8}, 4.0);  // attention-shaped scores
  check_against_cast(s, [](const ls::Tensor& t) { return t.softmax(-1); }, "SoftmaxBackward");
  ls::Tensor l = bf16_leaf({5, 37}, 4.0);
  check_against_cast(l, [](const ls::Tensor& t) { return t.log_softmax(1); }, "LogSoftmaxBackward");
  // Another dim than the last: the float32 path inside the same node, the same values.
  ls::Tensor d = bf16_leaf({4, 6, 3}, 2.0);
  check_against_cast(d, [](const ls::Tensor& t) { return t.softmax(1); }, "SoftmaxBackward");
}

TEST_CASE("bf16 in place: cross_entropy equals the cast, ignored rows included") {
  ls::manual_seed(45);
  ls::Tensor logits = bf16_leaf({6, 301}, 3.0);
  const ls::Tensor target = ls::tensor(std::vector<int64_t>{3, 0, -100, 300, 17, -100});
  check_against_cast(
      logits, [&](const ls::Tensor& t) { return ls::cross_entropy(t, target); },
      "CrossEntropyBackward");
  // Every row ignored: NaN loss and a zero gradient, as the float32 kernel gives.
  ls::Tensor all = bf16_leaf({2, 5}, 1.0);
  const ls::Tensor none = ls::tensor(std::vector<int64_t>{-100, -100});
  ls::Tensor loss;
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    loss = ls::cross_entropy(all, none);
  }
  CHECK(std::isnan(loss.item<float>()));
  loss.backward();
  CHECK(nv::equal(all.grad(), ls::zeros({2, 5}).to(ls::kBFloat16)));
}

TEST_CASE("bf16 in place: a wrong target is refused with the float32 op's message") {
  ls::Tensor logits = bf16_leaf({2, 4}, 1.0);
  const ls::Tensor target = ls::tensor(std::vector<int64_t>{1, 4});
  ls::AutocastGuard amp(ls::kBFloat16);
  CHECK_THROWS_WITH_AS(ls::cross_entropy(logits, target),
                       doctest::Contains("out of bounds for C = 4"), ls::Error);
}

TEST_CASE("bf16 in place: cross_entropy moves fewer bytes than the cast (profiler bytes)") {
  ls::manual_seed(46);
  ls::Tensor logits = bf16_leaf({8, 1000}, 2.0);
  const ls::Tensor target = ls::zeros({8}).to(ls::kInt64);
  ls::profiler::reset();
  ls::profiler::enable();
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    ls::cross_entropy(logits, target).backward();
  }
  ls::profiler::disable();
  // The bf16 logits read once forward (16 kB) and once backward with the bf16
  // gradient written (32 kB); the cast path moved 48 kB + 48 kB in casts alone.
  const double mb = ls::profiler::non_gemm_mb(ls::profiler::entries());
  CHECK(mb < 0.06);
  CHECK(mb > 0.04);
}

// Note [dropout writing the bf16 copy]: against dropout followed by the cast.
TEST_CASE("dropout writing bf16 equals dropout then the cast: values, mask and gradient") {
  ls::Tensor x = ls::randn({3, 4, 50}).requires_grad_(true);
  ls::Tensor ref_x = x.detach().clone().requires_grad_(true);
  const ls::Tensor g = ls::randn({3, 4, 50}).to(ls::kBFloat16);
  ls::manual_seed(49);
  const ls::Tensor ref = ls::dropout(ref_x, 0.3, true).to(ls::kBFloat16);
  ls::manual_seed(49);  // the same key: the same mask
  ls::Tensor out;
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    REQUIRE(ls::autograd::fuses_dropout_cast(x));
    out = ls::autograd::dropout_to_bf16(x, 0.3, true);
  }
  CHECK(out.dtype() == ls::kBFloat16);
  CHECK(out.grad_fn()->name() == "DropoutBackward");
  CHECK(reads_leaf_directly(out));
  CHECK(nv::equal(out.detach(), ref.detach()));
  out.backward(g);
  ref.backward(g);
  CHECK(x.grad().dtype() == ls::kFloat32);
  CHECK(nv::equal(x.grad(), ref_x.grad()));
  // Evaluation (or p == 0) is the identity, as dropout: the input itself, float32.
  CHECK(ls::autograd::dropout_to_bf16(x, 0.3, false).is_same(x));
}

// Note [dropout + residual add in one pass]: against x + dropout(y) as two ops.
TEST_CASE("dropout_add equals the residual add of a dropout: output and both gradients") {
  ls::Tensor x = ls::randn({2, 5, 40}).requires_grad_(true);
  ls::Tensor y = ls::randn({2, 5, 40}).to(ls::kBFloat16).requires_grad_(true);
  ls::Tensor rx = x.detach().clone().requires_grad_(true);
  ls::Tensor ry = y.detach().clone().requires_grad_(true);
  const ls::Tensor g = ls::randn({2, 5, 40});
  ls::manual_seed(50);
  const ls::Tensor ref = rx + ls::dropout(ry, 0.1, true);
  ls::manual_seed(50);
  ls::Tensor h;
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    REQUIRE(ls::autograd::fuses_dropout_add(x, y, 0.1, true));
    CHECK_FALSE(ls::autograd::fuses_dropout_add(x, y, 0.1, false));  // evaluation: x + y
    h = ls::autograd::dropout_add(x, y, 0.1);
  }
  CHECK(h.dtype() == ls::kFloat32);
  CHECK(h.grad_fn()->name() == "DropoutAddBackward");
  CHECK(nv::equal(h.detach(), ref.detach()));
  h.backward(g);
  ref.backward(g);
  CHECK(nv::equal(x.grad(), rx.grad()));
  CHECK(y.grad().dtype() == ls::kBFloat16);
  CHECK(nv::equal(y.grad(), ry.grad()));
}
