// tests/core/test_autocast.cpp — AutocastGuard and Note [Autocast policy]: which
// op computes and returns which dtype, the cast cache, nesting, enabled=false,
// gradient dtypes, and bf16 backward against float32 backward of the same ops.
#include <doctest/doctest.h>

#include "core/autocast.h"
#include "core/factory.h"
#include "core/grad_mode.h"
#include "core/native/native.h"
#include "core/nn_ops.h"
#include "core/rng.h"
#include "tests/support/compare.h"

namespace ls = lockstep;
namespace nv = lockstep::native;
using ls::testing::relative_error;

namespace {

ls::Tensor param(const ls::IntList& sizes) {
  ls::Tensor t = ls::randn(sizes) * 0.3;
  t.requires_grad_(true);
  return t;
}

}  // namespace

TEST_CASE("autocast: the policy table, op by op") {
  ls::manual_seed(10);
  ls::Tensor x = ls::randn({4, 3, 8, 8});
  ls::Tensor w = param({6, 3, 3, 3}), b = param({6});
  ls::Tensor lw = param({5, 16}), lb = param({5});
  ls::AutocastGuard amp(ls::kBFloat16);
  CHECK(ls::is_autocast_enabled());
  ls::Tensor y = ls::conv2d(x, w, b, {1, 1}, {1, 1});
  CHECK(y.dtype() == ls::kBFloat16);  // lower-precision op
  ls::Tensor rm = ls::zeros({6}), rv = ls::ones({6});
  ls::Tensor bn = ls::batch_norm_relu(y, ls::Tensor(), ls::Tensor(), rm, rv, true, 0.1, 1e-5);
  CHECK(bn.dtype() == ls::kBFloat16);  // bf16 activations, float32 statistics
  CHECK(rm.dtype() == ls::kFloat32);
  ls::Tensor h = ls::randn({4, 16});
  ls::Tensor z = ls::linear(h, lw, lb);
  CHECK(z.dtype() == ls::kBFloat16);
  CHECK(z.relu().dtype() == ls::kBFloat16);              // everything else: its input's dtype
  CHECK((z + ls::randn({4, 5})).dtype() == ls::kFloat32);  // bf16 + f32 promotes
  CHECK(z.softmax(-1).dtype() == ls::kFloat32);
  CHECK(z.log_softmax(-1).dtype() == ls::kFloat32);
  CHECK(ls::cross_entropy(z, ls::tensor(std::vector<int64_t>{0, 1, 2, 3}, {4})).dtype() ==
        ls::kFloat32);
  CHECK(ls::mse_loss(z, ls::zeros({4, 5})).dtype() == ls::kFloat32);
  CHECK(ls::layer_norm(z, {5}, ls::Tensor(), ls::Tensor()).dtype() == ls::kFloat32);
  ls::Tensor q = ls::randn({2, 3, 4, 8}), k = ls::randn({2, 3, 8, 4});
  CHECK(ls::matmul(q, k).dtype() == ls::kBFloat16);
  CHECK(ls::bmm(ls::randn({2, 3, 4}), ls::randn({2, 4, 5})).dtype() == ls::kBFloat16);
  // float64 is never autocast (gradcheck's dtype).
  CHECK(ls::matmul(ls::randn({2, 3}, ls::kFloat64), ls::randn({3, 2}, ls::kFloat64)).dtype() ==
        ls::kFloat64);
  // Integer tensors are left alone.
  CHECK(ls::embedding(lw, ls::tensor(std::vector<int64_t>{1, 2}, {2})).dtype() == ls::kFloat32);
}

TEST_CASE("autocast: guards nest, the innermost decides, enabled=false is bit-identical") {
  ls::manual_seed(11);
  ls::Tensor x = ls::randn({3, 16});
  ls::Tensor w = param({8, 16}), b = param({8});
  const ls::Tensor plain = ls::linear(x, w, b);
  CHECK_FALSE(ls::is_autocast_enabled());
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    CHECK(ls::linear(x, w, b).dtype() == ls::kBFloat16);
    {
      ls::AutocastGuard off(ls::kBFloat16, /*enabled=*/false);
      CHECK_FALSE(ls::is_autocast_enabled());
      const ls::Tensor inner = ls::linear(x, w, b);
      CHECK(inner.dtype() == ls::kFloat32);
      CHECK(nv::equal(inner, plain));
      {
        ls::AutocastGuard again(ls::kBFloat16);
        CHECK(ls::linear(x, w, b).dtype() == ls::kBFloat16);
      }
      CHECK_FALSE(ls::is_autocast_enabled());
    }
    CHECK(ls::is_autocast_enabled());
  }
  CHECK_FALSE(ls::is_autocast_enabled());
  {
    ls::AutocastGuard never(ls::kBFloat16, false);
    CHECK(nv::equal(ls::linear(x, w, b), plain));
  }
  CHECK_THROWS_WITH_AS(ls::AutocastGuard(ls::kFloat16), doctest::Contains("kBFloat16 only"),
                       ls::Error);
}

TEST_CASE("autocast: a parameter is converted once per outermost guard, again after an update") {
  ls::manual_seed(12);
  ls::Tensor w = param({8, 16}), b = param({8});
  ls::Tensor x = ls::randn({3, 16});
  CHECK(ls::autocast::cache_size() == 0);
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    const ls::Tensor w16 = ls::autocast::cached_cast(w, ls::kBFloat16);
    CHECK(w16.dtype() == ls::kBFloat16);
    CHECK(ls::autocast::cached_cast(w, ls::kBFloat16).is_same(w16));  // reused
    {
      ls::AutocastGuard inner(ls::kBFloat16);
      CHECK(ls::autocast::cached_cast(w, ls::kBFloat16).is_same(w16));  // the inner guard shares it
    }
    CHECK(ls::autocast::cache_size() >= 1);  // the inner guard's end keeps the outer's cache
    (void)ls::linear(x, w, b);
    CHECK(ls::autocast::cache_size() == 2);  // w and b; x is not a parameter
    CHECK_FALSE(ls::autocast::cached_cast(x, ls::kBFloat16).is_same(
        ls::autocast::cached_cast(x, ls::kBFloat16)));
    {
      ls::NoGradGuard no_grad;
      w.add_(ls::ones({8, 16}));  // an optimizer step inside the guard
    }
    const ls::Tensor fresh = ls::autocast::cached_cast(w, ls::kBFloat16);
    CHECK_FALSE(fresh.is_same(w16));
    CHECK(nv::equal(fresh, nv::to_dtype(w, ls::kBFloat16)));
  }
  CHECK(ls::autocast::cache_size() == 0);  // cleared with the outermost guard
}

TEST_CASE("autocast: a weight's transposed bf16 copy is row-major, cached per guard, renewed after an update") {
  ls::manual_seed(12);
  ls::Tensor w = param({5, 7});
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    const ls::Tensor wt = ls::autocast::cached_cast_transposed(w, ls::kBFloat16);
    CHECK(wt.dtype() == ls::kBFloat16);
    CHECK(wt.sizes() == ls::IntList{7, 5});
    CHECK(wt.is_contiguous());
    CHECK(nv::equal(wt, nv::contiguous(nv::transpose(nv::to_dtype(w, ls::kBFloat16), 0, 1))));
    CHECK(ls::autocast::cached_cast_transposed(w, ls::kBFloat16).is_same(wt));  // reused
    {
      ls::NoGradGuard no_grad;
      w.mul_(2.0);  // as an optimizer step would
    }
    const ls::Tensor fresh = ls::autocast::cached_cast_transposed(w, ls::kBFloat16);
    CHECK_FALSE(fresh.is_same(wt));
    CHECK(nv::equal(fresh, nv::contiguous(nv::transpose(nv::to_dtype(w, ls::kBFloat16), 0, 1))));
  }
  CHECK_THROWS_WITH_AS(ls::autocast::cached_cast_transposed(ls::randn({3}), ls::kBFloat16),
                       doctest::Contains("expected a 2-d tensor"), ls::Error);
}

TEST_CASE("autocast: parameters' gradients stay float32 and match float32 training") {
  ls::manual_seed(13);
  ls::Tensor x = ls::randn({4, 3, 10, 10});
  ls::Tensor cw = param({8, 3, 3, 3}), cb = param({8});
  ls::Tensor lw = param({5, 8 * 10 * 10}), lb = param({5});
  const ls::Tensor target = ls::tensor(std::vector<int64_t>{0, 4, 2, 1}, {4});
  // No ReLU between the layers: where a pre-activation is within bf16 rounding of
  // 0 its mask flips and moves a whole gradient element, which on a problem this
  // small dominates max-norm errors (test_autocast_training.cpp trains with ReLUs).
  auto loss_of = [&] {
    ls::Tensor h = ls::conv2d(x, cw, cb, {1, 1}, {1, 1});
    return ls::cross_entropy(ls::linear(h.flatten(1), lw, lb), target);
  };
  ls::Tensor loss32 = loss_of();
  loss32.backward();
  const ls::Tensor g32[] = {cw.grad().clone(), cb.grad().clone(), lw.grad().clone(),
                            lb.grad().clone()};
  for (ls::Tensor* p : {&cw, &cb, &lw, &lb}) p->mutable_grad() = ls::Tensor();
  ls::Tensor loss16;
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    loss16 = loss_of();
  }
  CHECK(loss16.dtype() == ls::kFloat32);
  CHECK(std::abs(loss16.item<double>() - loss32.item<double>()) < 2e-2 * std::abs(loss32.item<double>()));
  loss16.backward();
  int i = 0;
  for (ls::Tensor* p : {&cw, &cb, &lw, &lb}) {
    CAPTURE(i);
    REQUIRE(p->grad().defined());
    CHECK(p->grad().dtype() == ls::kFloat32);
    CHECK(relative_error(p->grad(), g32[i]) < 2e-2);  // bf16 activations: ~0.4% per rounding
    ++i;
  }
}

TEST_CASE("autocast: bf16 backward of linear and matmul equals float32 backward on bf16 values") {
  ls::manual_seed(14);
  // Values exactly representable in bf16, so the only differences are roundings of results.
  auto bf16_exact = [](const ls::IntList& s) {
    ls::Tensor t = nv::to_dtype(nv::to_dtype(ls::randn(s), ls::kBFloat16), ls::kFloat32);
    t.requires_grad_(true);
    return t;
  };
  ls::Tensor x = bf16_exact({6, 24}), w = bf16_exact({10, 24}), b = bf16_exact({10});
  ls::Tensor y32 = ls::linear(x, w, b);
  (y32 * y32).sum().backward();
  const ls::Tensor gx32 = x.grad().clone(), gw32 = w.grad().clone(), gb32 = b.grad().clone();
  for (ls::Tensor* p : {&x, &w, &b}) p->mutable_grad() = ls::Tensor();
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    ls::Tensor y16 = ls::linear(x, w, b);
    CHECK(relative_error(nv::to_dtype(y16, ls::kFloat32), y32) < 8e-3);
    (y16.to(ls::kFloat32) * y16.to(ls::kFloat32)).sum().backward();
  }
  CHECK(x.grad().dtype() == ls::kFloat32);
  CHECK(relative_error(x.grad(), gx32) < 2e-2);
  CHECK(relative_error(w.grad(), gw32) < 2e-2);
  CHECK(relative_error(b.grad(), gb32) < 2e-2);

  ls::Tensor a = bf16_exact({2, 5, 7}), c = bf16_exact({2, 7, 3});
  ls::matmul(a, c).sum().backward();
  const ls::Tensor ga32 = a.grad().clone(), gc32 = c.grad().clone();
  a.mutable_grad() = ls::Tensor();
  c.mutable_grad() = ls::Tensor();
  {
    ls::AutocastGuard amp(ls::kBFloat16);
    ls::matmul(a, c).to(ls::kFloat32).sum().backward();
  }
  CHECK(a.grad().dtype() == ls::kFloat32);  // Tensor::to's backward widens it back
  CHECK(relative_error(a.grad(), ga32) < 8e-3);
  CHECK(relative_error(c.grad(), gc32) < 8e-3);
}
