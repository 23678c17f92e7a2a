// tests/core/test_unary.cpp — unary math against the C++ standard library, the
// integer-safe ops on every dtype, pow, and the relu/gelu backward helpers.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "core/factory.h"
#include "core/native/native.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "tests/support/errors.h"

namespace ls = lockstep;
using lockstep::testing::error_of;
namespace nv = lockstep::native;
using ls::native::UnaryOp;

namespace {
const std::vector<double> kInputs = {-3.5, -1.0, -0.25, 0.0, 0.3, 1.0, 2.0, 7.5};
const std::vector<double> kPositive = {0.01, 0.3, 1.0, 2.0, 7.5, 100.0};

double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

// Checks unary(op) against ref on `inputs` in float64 (tight) and float32.
void check_op(UnaryOp op, const std::vector<double>& inputs, const std::function<double(double)>& ref) {
  CAPTURE(nv::unary_op_name(op));
  ls::Tensor x64 = ls::tensor(inputs, {static_cast<int64_t>(inputs.size())});
  std::vector<double> y64 = nv::unary(op, x64).to_vector<double>();
  ls::Tensor x32 = nv::to_dtype(x64, ls::kFloat32);
  ls::Tensor out32 = nv::unary(op, x32);
  CHECK(out32.dtype() == ls::kFloat32);
  std::vector<float> y32 = out32.to_vector<float>();
  for (size_t i = 0; i < inputs.size(); ++i) {
    CAPTURE(inputs[i]);
    CHECK(y64[i] == doctest::Approx(ref(inputs[i])).epsilon(1e-12));
    CHECK(y32[i] == doctest::Approx(ref(static_cast<float>(inputs[i]))).epsilon(1e-6));
  }
}

}  // namespace

TEST_CASE("unary: float ops match the standard library") {
  check_op(UnaryOp::Neg, kInputs, [](double x) { return -x; });
  check_op(UnaryOp::Abs, kInputs, [](double x) { return std::abs(x); });
  check_op(UnaryOp::Relu, kInputs, [](double x) { return x > 0 ? x : 0.0; });
  check_op(UnaryOp::Sign, kInputs, [](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); });
  check_op(UnaryOp::Gelu, kInputs, gelu_ref);
  check_op(UnaryOp::Exp, kInputs, [](double x) { return std::exp(x); });
  check_op(UnaryOp::Tanh, kInputs, [](double x) { return std::tanh(x); });
  check_op(UnaryOp::Sigmoid, kInputs, [](double x) { return 1.0 / (1.0 + std::exp(-x)); });
  check_op(UnaryOp::Erf, kInputs, [](double x) { return std::erf(x); });
  check_op(UnaryOp::Log, kPositive, [](double x) { return std::log(x); });
  check_op(UnaryOp::Sqrt, kPositive, [](double x) { return std::sqrt(x); });
  check_op(UnaryOp::Rsqrt, kPositive, [](double x) { return 1.0 / std::sqrt(x); });
}

TEST_CASE("unary: gelu known values and sigmoid saturation") {
  std::vector<double> g = nv::unary(UnaryOp::Gelu, ls::tensor(std::vector<double>{1, -1}, {2}))
                              .to_vector<double>();
  CHECK(g[0] == doctest::Approx(0.8413447460685429).epsilon(1e-14));
  CHECK(g[1] == doctest::Approx(-0.15865525393145707).epsilon(1e-14));
  std::vector<float> s =
      nv::unary(UnaryOp::Sigmoid, ls::tensor(std::vector<float>{-1000, 1000}, {2})).to_vector<float>();
  CHECK(s[0] == 0.0f);
  CHECK(s[1] == 1.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(nv::unary(UnaryOp::Relu, ls::tensor(std::vector<float>{nan}, {1})).item<float>()));
}

TEST_CASE("unary: neg, abs, relu, sign work on integer dtypes and keep them") {
  ls::Tensor i = ls::tensor(std::vector<int64_t>{-3, 0, 5}, {3});
  CHECK(nv::unary(UnaryOp::Neg, i).to_vector<int64_t>() == std::vector<int64_t>{3, 0, -5});
  CHECK(nv::unary(UnaryOp::Abs, i).to_vector<int64_t>() == std::vector<int64_t>{3, 0, 5});
  CHECK(nv::unary(UnaryOp::Relu, i).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 5});
  CHECK(nv::unary(UnaryOp::Sign, i).to_vector<int64_t>() == std::vector<int64_t>{-1, 0, 1});
  CHECK(nv::unary(UnaryOp::Abs, i).dtype() == ls::kInt64);
  ls::Tensor i32 = ls::tensor(std::vector<int32_t>{-2, 2}, {2});
  CHECK(nv::unary(UnaryOp::Abs, i32).to_vector<int32_t>() == std::vector<int32_t>{2, 2});
  ls::Tensor u8 = ls::tensor(std::vector<uint8_t>{0, 7}, {2});
  CHECK(nv::unary(UnaryOp::Sign, u8).to_vector<uint8_t>() == std::vector<uint8_t>{0, 1});
  CHECK(nv::unary(UnaryOp::Relu, u8).to_vector<uint8_t>() == std::vector<uint8_t>{0, 7});
}

TEST_CASE("unary: non-contiguous input gives a contiguous result in logical order") {
  ls::Tensor a = nv::reshape(ls::arange(0, 6, 1, ls::kFloat32), {2, 3});
  ls::Tensor t = nv::transpose(a, 0, 1);  // (3, 2)
  ls::Tensor e = nv::unary(UnaryOp::Exp, t);
  CHECK(e.is_contiguous());
  CHECK(e.sizes() == ls::IntList{3, 2});
  std::vector<float> tv = t.to_vector<float>();
  std::vector<float> ev = e.to_vector<float>();
  for (size_t k = 0; k < 6; ++k) CHECK(ev[k] == doctest::Approx(std::exp(tv[k])).epsilon(1e-6));
}

TEST_CASE("unary: pow_scalar, including the exponents with a cheaper exact form") {
  std::vector<double> xs = {0.5, 1.0, 2.0, 3.0};
  ls::Tensor x = ls::tensor(xs, {4});
  for (double e : {0.0, 1.0, 2.0, 3.0, -1.0, 0.5, 1.5, -2.5}) {
    CAPTURE(e);
    std::vector<double> y = nv::pow_scalar(x, e).to_vector<double>();
    for (size_t i = 0; i < xs.size(); ++i) CHECK(y[i] == doctest::Approx(std::pow(xs[i], e)).epsilon(1e-14));
  }
  CHECK(nv::pow_scalar(nv::to_dtype(x, ls::kFloat32), 2.0).dtype() == ls::kFloat32);
}

TEST_CASE("unary: relu_backward and gelu_backward") {
  ls::Tensor x = ls::tensor(std::vector<double>{-2, -0.5, 0, 0.5, 2}, {5});
  ls::Tensor g = ls::tensor(std::vector<double>{1, 2, 3, 4, 5}, {5});
  // The kink at 0 takes gradient 0.
  CHECK(nv::relu_backward(g, x).to_vector<double>() == std::vector<double>{0, 0, 0, 4, 5});
  // gelu_backward against central differences of gelu in float64.
  std::vector<double> xs = x.to_vector<double>();
  std::vector<double> got = nv::gelu_backward(g, x).to_vector<double>();
  const double h = 1e-6;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double slope = (gelu_ref(xs[i] + h) - gelu_ref(xs[i] - h)) / (2 * h);
    CHECK(got[i] == doctest::Approx((i + 1.0) * slope).epsilon(1e-8));
  }
  CHECK(nv::gelu_backward(g, x).to_vector<double>()[2] == doctest::Approx(3 * 0.5));  // gelu'(0) = 1/2
  std::string msg = error_of([&] { nv::relu_backward(g, ls::zeros({4}, ls::kFloat64)); });
  CHECK(msg.find("relu_backward") != std::string::npos);
  CHECK(msg.find("[5]") != std::string::npos);
}

// The float32 exp and erf are computed by vectorisable polynomials (see Note
// [Vectorisable exp and erf]); check them to within 2 ulp over their whole range.
TEST_CASE("unary: float32 exp and erf are within 2 ulp, with inf and NaN handled") {
  std::vector<float> xs;
  for (float x = -103.0f; x < 89.0f; x += 0.00731f) xs.push_back(x);
  for (float x = -1e-3f; x < 1e-3f; x += 3.3e-7f) xs.push_back(x);  // erf near 0: relative error
  const int64_t n = static_cast<int64_t>(xs.size());
  std::vector<float> e = nv::unary(UnaryOp::Exp, ls::tensor(xs, {n})).to_vector<float>();
  std::vector<float> f = nv::unary(UnaryOp::Erf, ls::tensor(xs, {n})).to_vector<float>();
  auto ulps = [](float got, double ref) {
    const float r = static_cast<float>(ref);
    const double ulp = r == 0 ? 1e-45 : std::nextafter(std::abs(r), INFINITY) - std::abs(r);
    return std::abs(got - ref) / ulp;
  };
  double worst_exp = 0, worst_erf = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double ref = std::exp(static_cast<double>(xs[i]));
    if (ref > 1.2e-38) worst_exp = std::max(worst_exp, ulps(e[i], ref));  // normal results
    worst_erf = std::max(worst_erf, ulps(f[i], std::erf(static_cast<double>(xs[i]))));
  }
  CHECK(worst_exp <= 2.0);
  CHECK(worst_erf <= 2.0);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ls::Tensor special = ls::tensor(std::vector<float>{-inf, inf, nan, -200.0f, 200.0f}, {5});
  std::vector<float> se = nv::unary(UnaryOp::Exp, special).to_vector<float>();
  CHECK(se[0] == 0.0f);
  CHECK(se[1] == inf);
  CHECK(std::isnan(se[2]));
  CHECK(se[3] == 0.0f);
  CHECK(se[4] == inf);
  std::vector<float> sf = nv::unary(UnaryOp::Erf, special).to_vector<float>();
  CHECK(sf[0] == -1.0f);
  CHECK(sf[1] == 1.0f);
  CHECK(std::isnan(sf[2]));
}

TEST_CASE("unary: large input takes the parallel path") {
  const int saved = ls::get_num_threads();
  ls::set_num_threads(4);
  ls::Tensor x = ls::randn({300001});
  std::vector<float> xv = x.to_vector<float>();
  std::vector<float> y = nv::unary(UnaryOp::Tanh, x).to_vector<float>();
  std::vector<float> r = nv::unary(UnaryOp::Relu, x).to_vector<float>();
  size_t bad = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    bad += y[i] != std::tanh(xv[i]);
    bad += r[i] != (xv[i] < 0 ? 0.0f : xv[i]);
  }
  CHECK(bad == 0);
  ls::set_num_threads(saved);
}

TEST_CASE("unary: errors for unsupported dtypes") {
  ls::Tensor i = ls::tensor(std::vector<int64_t>{1, 2}, {2});
  std::string msg = error_of([&] { nv::unary(UnaryOp::Exp, i); });
  CHECK(msg.find("exp") != std::string::npos);
  CHECK(msg.find("int64") != std::string::npos);
  CHECK(msg.find("float32") != std::string::npos);
  ls::Tensor b = nv::compare_scalar(ls::native::CompareOp::Gt, i, 1.0);
  msg = error_of([&] { nv::unary(UnaryOp::Neg, b); });
  CHECK(msg.find("neg") != std::string::npos);
  CHECK(msg.find("bool") != std::string::npos);
  CHECK_THROWS_AS(nv::pow_scalar(i, 2.0), ls::Error);
  // bfloat16 computes in float (Note [bfloat16 elementwise]); float16 is storage only.
  CHECK(nv::unary(UnaryOp::Log, nv::to_dtype(ls::ones({2}), ls::kBFloat16)).dtype() == ls::kBFloat16);
  CHECK_THROWS_AS(nv::unary(UnaryOp::Log, nv::to_dtype(ls::zeros({2}), ls::kFloat16)), ls::Error);
}
