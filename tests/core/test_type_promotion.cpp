// tests/core/test_type_promotion.cpp — PyTorch's type promotion: a C++ scalar
// keeps its category whatever its value (Note [Scalar type promotion] in
// core/tensor.h), and result_type of two tensors ranks categories and lets a 0-d
// operand decide only when its category is higher (Note [Type promotion
// categories] in core/type_promotion.cpp). Expected dtypes and values are
// PyTorch 2's (torch.result_type and the ops themselves).
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "core/factory.h"
#include "core/tensor.h"

namespace ls = lockstep;

TEST_CASE("type promotion: an integer tensor with a floating scalar is float32 whatever the value") {
  // Before: arange(4) * 10.0 stayed int64 because 10.0 is whole.
  ls::Tensor a = ls::arange(4);
  ls::Tensor r = a * 10.0;
  CHECK(r.dtype() == ls::kFloat32);
  CHECK(r.to_vector<float>() == std::vector<float>{0, 10, 20, 30});
  CHECK((a * 0.5).dtype() == ls::kFloat32);
  CHECK((10.0 * a).dtype() == ls::kFloat32);
  CHECK((a + 1.0).dtype() == ls::kFloat32);
  CHECK((a - 1.0).dtype() == ls::kFloat32);
  CHECK((1.0 - a).dtype() == ls::kFloat32);
  CHECK((a / 2.0).dtype() == ls::kFloat32);
  CHECK((2.0 / (a + 1)).dtype() == ls::kFloat32);
  CHECK((a * 2.0f).dtype() == ls::kFloat32);  // float is floating too
}

TEST_CASE("type promotion: uint8 [10, 200] * 2.0 is float32 [20, 400], not a wrapped uint8") {
  ls::Tensor u = ls::tensor(std::vector<uint8_t>{10, 200}, {2});
  ls::Tensor r = u * 2.0;
  CHECK(r.dtype() == ls::kFloat32);
  CHECK(r.to_vector<float>() == std::vector<float>{20, 400});
  // An integer scalar keeps uint8 and wraps, as in PyTorch.
  ls::Tensor w = u * 2;
  CHECK(w.dtype() == ls::kUInt8);
  CHECK(w.to_vector<int64_t>() == std::vector<int64_t>{20, 144});
}

TEST_CASE("type promotion: an integer scalar never promotes a tensor, bool becomes int64, / is true division") {
  ls::Tensor a = ls::arange(4);
  CHECK((a * 10).dtype() == ls::kInt64);
  CHECK((a * 10).to_vector<int64_t>() == std::vector<int64_t>{0, 10, 20, 30});
  CHECK((a + int64_t{1}).dtype() == ls::kInt64);
  CHECK((3 - a).to_vector<int64_t>() == std::vector<int64_t>{3, 2, 1, 0});
  CHECK((a / 2).dtype() == ls::kFloat32);  // true division, as torch.div
  CHECK((a / 2).to_vector<float>() == std::vector<float>{0, 0.5f, 1, 1.5f});
  ls::Tensor i32 = ls::tensor(std::vector<int32_t>{1, 2}, {2});
  CHECK((i32 * int64_t{3}).dtype() == ls::kInt32);
  ls::Tensor b = ls::arange(3).gt(0);  // bool
  CHECK((b + 1).dtype() == ls::kInt64);
  CHECK((b * 1.5).dtype() == ls::kFloat32);
  ls::Tensor f = ls::ones({2}, ls::TensorOptions().dtype(ls::kFloat64));
  CHECK((f * 2).dtype() == ls::kFloat64);
  CHECK((f * 2.0).dtype() == ls::kFloat64);
  ls::Tensor h = ls::ones({2}, ls::TensorOptions().dtype(ls::kBFloat16));
  CHECK((h * 2.0).dtype() == ls::kBFloat16);
  CHECK((h + 1).dtype() == ls::kBFloat16);
}

TEST_CASE("type promotion: result_type of two tensors, dimensioned and 0-d") {
  auto t = [](ls::ScalarType d, ls::IntList sizes) { return ls::ones(sizes, ls::TensorOptions().dtype(d)); };
  using ls::kBool, ls::kUInt8, ls::kInt32, ls::kInt64, ls::kFloat32, ls::kFloat64, ls::kBFloat16, ls::kFloat16;
  // Both dimensioned (or both 0-d): the lattice.
  CHECK(ls::result_type(t(kInt64, {2}), t(kFloat32, {2})) == kFloat32);
  CHECK(ls::result_type(t(kUInt8, {2}), t(kInt32, {2})) == kInt32);
  CHECK(ls::result_type(t(kBFloat16, {2}), t(kFloat16, {2})) == kFloat32);
  CHECK(ls::result_type(t(kFloat32, {}), t(kFloat64, {})) == kFloat64);
  // A 0-d operand of the same or a lower category does not widen a dimensioned one.
  CHECK(ls::result_type(t(kFloat32, {2}), t(kFloat64, {})) == kFloat32);
  CHECK(ls::result_type(t(kFloat64, {}), t(kBFloat16, {2})) == kBFloat16);
  CHECK(ls::result_type(t(kUInt8, {2}), t(kInt64, {})) == kUInt8);
  CHECK(ls::result_type(t(kFloat32, {2}), t(kInt64, {})) == kFloat32);
  // A 0-d operand of a higher category decides.
  CHECK(ls::result_type(t(kInt64, {2}), t(kFloat64, {})) == kFloat64);
  CHECK(ls::result_type(t(kBool, {2}), t(kInt64, {})) == kInt64);
  CHECK(ls::result_type(t(kBool, {2}), t(kFloat32, {})) == kFloat32);
  // The ops follow it.
  ls::Tensor x = t(kFloat32, {3});
  ls::Tensor s = ls::scalar_tensor(2.0, ls::TensorOptions().dtype(kFloat64));
  CHECK((x * s).dtype() == kFloat32);
  CHECK((x * s).to_vector<float>() == std::vector<float>{2, 2, 2});
  CHECK((ls::arange(3) * s).dtype() == kFloat64);
  CHECK((t(kUInt8, {2}) + ls::scalar_tensor(1.0, ls::TensorOptions().dtype(kInt64))).dtype() == kUInt8);
}

TEST_CASE("type promotion: a float32 parameter times a float64 0-d tensor keeps float32 and its gradient") {
  ls::Tensor w = ls::ones({3}, ls::requires_grad());
  ls::Tensor s = ls::scalar_tensor(0.5, ls::TensorOptions().dtype(ls::kFloat64).requires_grad(true));
  ls::Tensor y = (w * s).sum();
  CHECK(y.dtype() == ls::kFloat32);
  y.backward();
  CHECK(w.grad().dtype() == ls::kFloat32);
  CHECK(w.grad().to_vector<float>() == std::vector<float>{0.5f, 0.5f, 0.5f});
  CHECK(s.grad().dtype() == ls::kFloat64);
  CHECK(s.grad().item<double>() == doctest::Approx(3.0));
}
