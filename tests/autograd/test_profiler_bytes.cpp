// tests/autograd/test_profiler_bytes.cpp — Note [Profiler bytes] (core/profiler.h):
// each op's scope counts the bytes of its operands and results once, views move
// nothing, the backward counts incoming gradients, unpacked saved tensors and
// the gradients it returns, and scopes that ran a GEMM are kept out of the
// memory-bound sum.
// Read before: autograd/traffic.h.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "autograd/traffic.h"
#include "core/factory.h"
#include "core/profiler.h"
#include "core/tensor.h"
#include "tests/support/profiler_rows.h"

namespace ls = lockstep;

TEST_CASE("profiler bytes: an elementwise op counts its operand and its result once") {
  ls::Tensor x = ls::ones({1000}, ls::requires_grad());  // 4000 bytes
  ls::profiler::reset();
  ls::profiler::enable();
  ls::Tensor y = x.exp();
  ls::Tensor v = y.view({10, 100});  // a view: no bytes
  ls::profiler::disable();
  const auto rows = ls::profiler::entries();
  const auto* exp = ls::testing::find_entry(rows, "exp");
  REQUIRE(exp != nullptr);
  CHECK(exp->self_mb == doctest::Approx(8000e-6));
  CHECK_FALSE(exp->gemm);
  const auto* view = ls::testing::find_entry(rows, "view");
  REQUIRE(view != nullptr);
  CHECK(view->self_mb == 0.0);
  CHECK(ls::profiler::non_gemm_mb(rows) == doctest::Approx(8000e-6));
  CHECK(v.numel() == 1000);
}

TEST_CASE("profiler bytes: the backward reads the saved result and writes the input gradient") {
  ls::Tensor x = ls::ones({1000}, ls::requires_grad());
  ls::Tensor y = x.exp();  // ExpBackward saves y
  ls::Tensor g = ls::ones({1000});
  ls::profiler::reset();
  ls::profiler::enable();
  y.backward(g);
  ls::profiler::disable();
  const auto rows = ls::profiler::entries();
  const auto* node = ls::testing::find_entry(rows, "ExpBackward");
  REQUIRE(node != nullptr);
  // incoming gradient 4000 + saved y 4000 + gradient of x 4000
  CHECK(node->self_mb == doctest::Approx(12000e-6));
}

TEST_CASE("profiler bytes: a broadcast operand counts its distinct elements, matmul is a GEMM op") {
  ls::Tensor a = ls::ones({64, 32}, ls::requires_grad());
  ls::Tensor b = ls::ones({32}, ls::requires_grad());
  ls::Tensor w = ls::ones({32, 16}, ls::requires_grad());
  ls::profiler::reset();
  ls::profiler::enable();
  ls::Tensor s = a + b.unsqueeze(0).expand({64, 32});
  ls::Tensor p = s.matmul(w);
  ls::profiler::disable();
  const auto rows = ls::profiler::entries();
  const auto* add = ls::testing::find_entry(rows, "add");
  REQUIRE(add != nullptr);
  CHECK(add->self_mb == doctest::Approx((64 * 32 + 32 + 64 * 32) * 4e-6));
  const auto* mm = ls::testing::find_entry(rows, "matmul");
  REQUIRE(mm != nullptr);
  CHECK(mm->gemm);
  CHECK(mm->self_mb > 0.0);
  double expected = 0.0;  // every op but the matmul
  for (const auto& e : rows) expected += e.name == "matmul" ? 0.0 : e.self_mb;
  CHECK(ls::profiler::non_gemm_mb(rows) == doctest::Approx(expected));
  CHECK(p.size(1) == 16);
}

TEST_CASE("profiler bytes: nothing is counted while the profiler is off") {
  ls::profiler::reset();
  ls::Tensor x = ls::ones({100}, ls::requires_grad());
  ls::Tensor y = x.exp();
  CHECK(ls::profiler::entries().empty());
  CHECK(ls::autograd::distinct_bytes(y) == 400);
}
