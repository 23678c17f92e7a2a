// tests/core/test_elementwise.cpp — binary ops with broadcasting, scalar ops, in-place
// ops, dtype promotion, comparisons, where, allclose/equal, and their errors.
#include <doctest/doctest.h>

#include <cmath>
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
using ls::native::BinaryOp;
using ls::native::CompareOp;

namespace {
ls::Tensor f32(const std::vector<float>& v, const ls::IntList& sizes) { return ls::tensor(v, sizes); }
ls::Tensor i64(const std::vector<int64_t>& v, const ls::IntList& sizes) {
  return ls::tensor(v, sizes);
}
// 0, 1, 2, ... as float32 of the given shape.
ls::Tensor iota(const ls::IntList& sizes) {
  return nv::reshape(ls::arange(0, ls::numel_of(sizes), 1, ls::kFloat32), sizes);
}
std::vector<float> fv(const ls::Tensor& t) { return t.to_vector<float>(); }
std::vector<bool> bv(const ls::Tensor& t) {
  std::vector<bool> out;
  for (uint8_t v : nv::to_dtype(t, ls::kUInt8).to_vector<uint8_t>()) out.push_back(v != 0);
  return out;
}
// What ls::Error says when fn throws it ("" if it does not throw).
}  // namespace

TEST_CASE("elementwise: add, sub, mul, div of same-shape float tensors") {
  ls::Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  ls::Tensor b = f32({6, 5, 4, 3, 2, 1}, {2, 3});
  CHECK(fv(nv::binary(BinaryOp::Add, a, b)) == std::vector<float>{7, 7, 7, 7, 7, 7});
  CHECK(fv(nv::binary(BinaryOp::Sub, a, b)) == std::vector<float>{-5, -3, -1, 1, 3, 5});
  CHECK(fv(nv::binary(BinaryOp::Mul, a, b)) == std::vector<float>{6, 10, 12, 12, 10, 6});
  std::vector<float> q = fv(nv::binary(BinaryOp::Div, a, b));
  for (int i = 0; i < 6; ++i) CHECK(q[i] == doctest::Approx((i + 1.0) / (6.0 - i)));
  ls::Tensor out = nv::binary(BinaryOp::Add, a, b);
  CHECK(out.sizes() == ls::IntList{2, 3});
  CHECK(out.dtype() == ls::kFloat32);
  CHECK(out.is_contiguous());
  CHECK(fv(nv::add(a, b, 0.5)) == std::vector<float>{4, 4.5, 5, 5.5, 6, 6.5});
}

TEST_CASE("elementwise: broadcasting (2,3)+(3), (2,1)+(1,3), 0-d and empty") {
  ls::Tensor a = iota({2, 3});
  ls::Tensor row = f32({10, 20, 30}, {3});
  CHECK(fv(nv::binary(BinaryOp::Add, a, row)) == std::vector<float>{10, 21, 32, 13, 24, 35});
  CHECK(fv(nv::binary(BinaryOp::Sub, row, a)) == std::vector<float>{10, 19, 28, 7, 16, 25});

  ls::Tensor col = f32({1, 2}, {2, 1});
  ls::Tensor r13 = f32({10, 20, 30}, {1, 3});
  ls::Tensor outer = nv::binary(BinaryOp::Mul, col, r13);
  CHECK(outer.sizes() == ls::IntList{2, 3});
  CHECK(fv(outer) == std::vector<float>{10, 20, 30, 20, 40, 60});

  ls::Tensor s = ls::scalar_tensor(2.0);
  CHECK(s.dim() == 0);
  CHECK(fv(nv::binary(BinaryOp::Mul, a, s)) == std::vector<float>{0, 2, 4, 6, 8, 10});
  ls::Tensor ss = nv::binary(BinaryOp::Add, s, s);
  CHECK(ss.dim() == 0);
  CHECK(ss.item<float>() == 4.0f);

  ls::Tensor empty = nv::binary(BinaryOp::Add, ls::zeros({0, 3}), row);
  CHECK(empty.sizes() == ls::IntList{0, 3});
}

TEST_CASE("elementwise: non-contiguous inputs (transpose, narrow, expand)") {
  ls::Tensor a = iota({3, 4});
  ls::Tensor t = nv::transpose(a, 0, 1);  // (4, 3), t[i][j] = a[j][i] = 4j + i
  ls::Tensor b = iota({4, 3});
  std::vector<float> got = fv(nv::binary(BinaryOp::Sub, t, b));
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 3; ++j) CHECK(got[i * 3 + j] == float(4 * j + i) - float(i * 3 + j));
  }
  ls::Tensor n = nv::narrow(a, 1, 1, 2);  // (3, 2): columns 1 and 2
  CHECK(fv(nv::binary(BinaryOp::Mul, n, n)) == std::vector<float>{1, 4, 25, 36, 81, 100});
  ls::Tensor e = nv::expand(f32({1, 2, 3}, {3, 1}), {3, 2});  // stride 0 on dim 1
  CHECK(fv(nv::binary(BinaryOp::Add, n, e)) == std::vector<float>{2, 3, 7, 8, 12, 13});
  // Both inputs transposed: the result is still laid out row-major.
  ls::Tensor tt = nv::binary(BinaryOp::Add, t, t);
  CHECK(tt.is_contiguous());
  CHECK(fv(tt) == std::vector<float>{0, 8, 16, 2, 10, 18, 4, 12, 20, 6, 14, 22});
}

TEST_CASE("elementwise: dtype promotion and integer division") {
  ls::Tensor i = i64({1, 2, 3}, {3});
  ls::Tensor f = f32({0.5, 0.5, 0.5}, {3});
  ls::Tensor r = nv::binary(BinaryOp::Add, i, f);
  CHECK(r.dtype() == ls::kFloat32);
  CHECK(fv(r) == std::vector<float>{1.5, 2.5, 3.5});
  ls::Tensor i32 = ls::tensor(std::vector<int32_t>{10, 20, 30}, {3});
  ls::Tensor r2 = nv::binary(BinaryOp::Mul, i32, i);
  CHECK(r2.dtype() == ls::kInt64);
  CHECK(r2.to_vector<int64_t>() == std::vector<int64_t>{10, 40, 90});
  ls::Tensor d = nv::binary(BinaryOp::Div, i64({7, -7, 1}, {3}), i64({2, 2, 3}, {3}));
  CHECK(d.dtype() == ls::kFloat32);  // true division, like PyTorch
  CHECK(fv(d)[0] == 3.5f);
  CHECK(fv(d)[1] == -3.5f);
  CHECK(fv(d)[2] == doctest::Approx(1.0 / 3.0));
  ls::Tensor f64 = ls::tensor(std::vector<double>{1, 2, 3}, {3});
  CHECK(nv::binary(BinaryOp::Add, f, f64).dtype() == ls::kFloat64);
}

TEST_CASE("elementwise: scalar ops keep integer tensors integer for whole scalars") {
  ls::Tensor i = i64({1, 2, 3}, {3});
  ls::Tensor plus = nv::binary_scalar(BinaryOp::Add, i, 2.0);
  CHECK(plus.dtype() == ls::kInt64);
  CHECK(plus.to_vector<int64_t>() == std::vector<int64_t>{3, 4, 5});
  ls::Tensor half = nv::binary_scalar(BinaryOp::Add, i, 0.5);
  CHECK(half.dtype() == ls::kFloat32);
  CHECK(fv(half) == std::vector<float>{1.5, 2.5, 3.5});
  ls::Tensor div = nv::binary_scalar(BinaryOp::Div, i, 2.0);
  CHECK(div.dtype() == ls::kFloat32);
  CHECK(fv(div) == std::vector<float>{0.5, 1, 1.5});
  ls::Tensor d = ls::tensor(std::vector<double>{1, 2, 4}, {3});
  ls::Tensor m = nv::binary_scalar(BinaryOp::Mul, d, 0.25);
  CHECK(m.dtype() == ls::kFloat64);
  CHECK(m.to_vector<double>() == std::vector<double>{0.25, 0.5, 1});
  CHECK(fv(nv::scalar_binary(BinaryOp::Sub, 1.0, f32({1, 2, 3}, {3}))) ==
        std::vector<float>{0, -1, -2});
  CHECK(fv(nv::scalar_binary(BinaryOp::Div, 2.0, f32({1, 4, 8}, {3}))) ==
        std::vector<float>{2, 0.5, 0.25});
  CHECK(fv(nv::binary_scalar(BinaryOp::Maximum, f32({-1, 0, 3}, {3}), 1.0)) ==
        std::vector<float>{1, 1, 3});
  ls::Tensor b = nv::compare_scalar(CompareOp::Gt, i, 1.0);  // bool
  ls::Tensor bsum = nv::binary_scalar(BinaryOp::Add, b, 1.0);
  CHECK(bsum.dtype() == ls::kInt64);
  CHECK(bsum.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 2});
}

TEST_CASE("elementwise: in-place ops broadcast other and keep self's dtype") {
  ls::Tensor a = iota({2, 3});
  nv::binary_(BinaryOp::Add, a, f32({10, 20, 30}, {3}));
  CHECK(fv(a) == std::vector<float>{10, 21, 32, 13, 24, 35});
  nv::binary_(BinaryOp::Mul, a, a);  // other aliases self
  CHECK(fv(a) == std::vector<float>{100, 441, 1024, 169, 576, 1225});
  nv::binary_scalar_(BinaryOp::Div, a, 4.0);
  CHECK(fv(a)[0] == 25.0f);
  // A non-contiguous self (a column of a matrix) is written through its strides.
  ls::Tensor m = iota({3, 3});
  nv::binary_(BinaryOp::Sub, nv::select(m, 1, 0), f32({1, 1, 1}, {3}));
  CHECK(fv(m) == std::vector<float>{-1, 1, 2, 2, 4, 5, 5, 7, 8});
  ls::Tensor i = i64({1, 2, 3}, {3});
  nv::binary_(BinaryOp::Add, i, ls::tensor(std::vector<int32_t>{1, 1, 1}, {3}));
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{2, 3, 4});
  nv::binary_scalar_(BinaryOp::Mul, i, 3.0);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{6, 9, 12});
}

TEST_CASE("elementwise: maximum and minimum propagate NaN") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ls::Tensor a = f32({1, nan, 3, 4}, {4});
  ls::Tensor b = f32({2, 0, nan, 1}, {4});
  std::vector<float> mx = fv(nv::binary(BinaryOp::Maximum, a, b));
  CHECK(mx[0] == 2);
  CHECK(std::isnan(mx[1]));
  CHECK(std::isnan(mx[2]));
  CHECK(mx[3] == 4);
  std::vector<float> mn = fv(nv::binary(BinaryOp::Minimum, a, b));
  CHECK(mn[0] == 1);
  CHECK(std::isnan(mn[1]));
  CHECK(std::isnan(mn[2]));
  CHECK(mn[3] == 1);
}

TEST_CASE("elementwise: comparisons give bool and broadcast") {
  ls::Tensor a = f32({1, 2, 3}, {3});
  ls::Tensor b = f32({2, 2, 2}, {3});
  CHECK(bv(nv::compare(CompareOp::Eq, a, b)) == std::vector<bool>{false, true, false});
  CHECK(bv(nv::compare(CompareOp::Ne, a, b)) == std::vector<bool>{true, false, true});
  CHECK(bv(nv::compare(CompareOp::Lt, a, b)) == std::vector<bool>{true, false, false});
  CHECK(bv(nv::compare(CompareOp::Le, a, b)) == std::vector<bool>{true, true, false});
  CHECK(bv(nv::compare(CompareOp::Gt, a, b)) == std::vector<bool>{false, false, true});
  CHECK(bv(nv::compare(CompareOp::Ge, a, b)) == std::vector<bool>{false, true, true});
  ls::Tensor c = nv::compare(CompareOp::Lt, f32({1, 2}, {2, 1}), a);  // (2, 3)
  CHECK(c.dtype() == ls::kBool);
  CHECK(c.sizes() == ls::IntList{2, 3});
  CHECK(bv(c) == std::vector<bool>{false, true, true, false, false, true});
  // Mixed dtypes compare in the promoted dtype.
  CHECK(bv(nv::compare(CompareOp::Eq, i64({1, 2, 3}, {3}), a)) == std::vector<bool>{true, true, true});
  // The scalar takes a float tensor's dtype; integers compare exactly with any scalar.
  CHECK(bv(nv::compare_scalar(CompareOp::Eq, f32({0.1f}, {1}), 0.1)) == std::vector<bool>{true});
  CHECK(bv(nv::compare_scalar(CompareOp::Lt, i64({2, 3}, {2}), 2.5)) == std::vector<bool>{true, false});
  ls::Tensor u8 = ls::tensor(std::vector<uint8_t>{255, 44}, {2});
  CHECK(bv(nv::compare_scalar(CompareOp::Lt, u8, 300.0)) == std::vector<bool>{true, true});
  CHECK(bv(nv::compare_scalar(CompareOp::Eq, u8, 44.0)) == std::vector<bool>{false, true});
}

TEST_CASE("elementwise: where broadcasts condition, a and b") {
  ls::Tensor x = f32({-1, 2, -3, 4, -5, 6}, {2, 3});
  ls::Tensor cond = nv::compare_scalar(CompareOp::Gt, x, 0.0);
  ls::Tensor r = nv::where(cond, x, ls::scalar_tensor(0.0));
  CHECK(fv(r) == std::vector<float>{0, 2, 0, 4, 0, 6});
  // (3) condition, (2, 1) a, (1, 3) b -> (2, 3); int64 a and float32 b promote to float32.
  ls::Tensor c3 = nv::compare_scalar(CompareOp::Ne, f32({1, 0, 1}, {3}), 0.0);
  ls::Tensor w = nv::where(c3, i64({1, 2}, {2, 1}), f32({7, 8, 9}, {1, 3}));
  CHECK(w.dtype() == ls::kFloat32);
  CHECK(w.sizes() == ls::IntList{2, 3});
  CHECK(fv(w) == std::vector<float>{1, 8, 1, 2, 8, 2});
  std::string msg = error_of([&] { nv::where(x, x, x); });
  CHECK(msg.find("where") != std::string::npos);
  CHECK(msg.find("bool") != std::string::npos);
}

TEST_CASE("elementwise: allclose and equal") {
  ls::Tensor a = f32({1, 2, 3}, {3});
  CHECK(nv::allclose(a, f32({1, 2, 3.000001f}, {3}), 1e-5, 1e-8));
  CHECK_FALSE(nv::allclose(a, f32({1, 2, 3.1f}, {3}), 1e-5, 1e-8));
  CHECK(nv::allclose(a, f32({1, 2, 3.1f}, {3}), 0, 0.2));
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(nv::allclose(f32({inf}, {1}), f32({inf}, {1}), 1e-5, 1e-8));
  CHECK_FALSE(nv::allclose(f32({NAN}, {1}), f32({NAN}, {1}), 1e-5, 1e-8));
  CHECK(nv::allclose(f32({2, 2}, {2}), ls::scalar_tensor(2.0), 0, 0));  // broadcasts
  CHECK(nv::equal(a, f32({1, 2, 3}, {3})));
  CHECK(nv::equal(a, i64({1, 2, 3}, {3})));
  CHECK_FALSE(nv::equal(a, f32({1, 2, 4}, {3})));
  CHECK_FALSE(nv::equal(a, f32({1, 2, 3}, {3, 1})));  // shapes differ
  CHECK(nv::equal(nv::transpose(iota({2, 3}), 0, 1), nv::contiguous(nv::transpose(iota({2, 3}), 0, 1))));
}

TEST_CASE("elementwise: large inputs take the parallel path and match a plain loop") {
  const int saved = ls::get_num_threads();
  ls::set_num_threads(4);
  const int64_t rows = 1000, cols = 1037;  // not a multiple of any vector width
  ls::Tensor a = ls::randn({rows, cols});
  ls::Tensor bias = ls::randn({cols});
  ls::Tensor col = ls::randn({rows, 1});
  std::vector<float> av = fv(a), bvv = fv(bias), cv = fv(col);

  std::vector<float> sum = fv(nv::binary(BinaryOp::Add, a, bias));
  std::vector<float> prod = fv(nv::binary(BinaryOp::Mul, a, col));
  std::vector<float> same = fv(nv::binary(BinaryOp::Sub, a, a));
  ls::Tensor at = nv::transpose(a, 0, 1);  // (cols, rows), non-contiguous
  std::vector<float> tsum = fv(nv::binary(BinaryOp::Add, at, at));
  size_t bad = 0;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const size_t k = static_cast<size_t>(i * cols + j);
      bad += sum[k] != av[k] + bvv[j];
      bad += prod[k] != av[k] * cv[i];
      bad += same[k] != 0.0f;
      bad += tsum[static_cast<size_t>(j * rows + i)] != av[k] + av[k];
    }
  }
  CHECK(bad == 0);
  ls::set_num_threads(saved);
}

TEST_CASE("elementwise: errors name the op, the shapes and what to do") {
  ls::Tensor a = ls::zeros({2, 3});
  ls::Tensor b = ls::zeros({4});
  CHECK_THROWS_AS(nv::binary(BinaryOp::Add, a, b), ls::Error);
  std::string msg = error_of([&] { nv::binary(BinaryOp::Add, a, b); });
  CHECK(msg.find("add") != std::string::npos);
  CHECK(msg.find("broadcast") != std::string::npos);
  CHECK(msg.find("[2, 3]") != std::string::npos);
  CHECK(msg.find("[4]") != std::string::npos);

  // In place: other must broadcast to self without growing it.
  msg = error_of([&] { nv::binary_(BinaryOp::Add, ls::zeros({3}), a); });
  CHECK(msg.find("add_") != std::string::npos);
  CHECK(msg.find("self") != std::string::npos);
  // In place: an integer self cannot hold a float result.
  msg = error_of([&] { nv::binary_(BinaryOp::Div, i64({1, 2}, {2}), i64({1, 2}, {2})); });
  CHECK(msg.find("div_") != std::string::npos);
  CHECK(msg.find("int64") != std::string::npos);
  CHECK_THROWS_AS(nv::binary_scalar_(BinaryOp::Add, i64({1}, {1}), 0.5), ls::Error);
  // In place: an expanded self would write one element several times.
  msg = error_of([&] { nv::binary_scalar_(BinaryOp::Add, nv::expand(ls::zeros({1}), {4}), 1.0); });
  CHECK(msg.find("expanded") != std::string::npos);
  // Storage-only dtypes must be converted first.
  msg = error_of([&] {
    ls::Tensor h = nv::to_dtype(a, ls::kFloat16);
    nv::binary(BinaryOp::Mul, h, h);
  });
  CHECK(msg.find("float16") != std::string::npos);
  CHECK(msg.find(".to(") != std::string::npos);
  CHECK_THROWS_AS(nv::add(i64({1}, {1}), i64({1}, {1}), 0.5), ls::Error);
  CHECK_THROWS_AS(nv::binary(BinaryOp::Add, a, ls::Tensor()), ls::Error);
  CHECK_THROWS_AS(nv::compare(CompareOp::Eq, a, b), ls::Error);
}
