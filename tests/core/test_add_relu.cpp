// tests/core/test_add_relu.cpp — native::add_relu, max(a + b, 0) in one pass,
// against the unfused binary add and ReLU, on contiguous and strided inputs.
// Read before: core/native/add_relu.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/factory.h"
#include "core/native/fused_relu.h"
#include "core/native/native.h"
#include "core/rng.h"

namespace ls = lockstep;
namespace native = lockstep::native;
using ls::Tensor;

TEST_CASE("add_relu: equals relu(a + b) for float32 and float64, contiguous or strided") {
  ls::manual_seed(21);
  for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64}) {
    const auto opts = ls::TensorOptions().dtype(dtype);
    Tensor a = ls::randn({3, 8, 5, 7}, opts), b = ls::randn({3, 8, 5, 7}, opts);
    Tensor bt = ls::randn({3, 8, 7, 5}, opts).transpose(2, 3);  // non-contiguous (3, 8, 5, 7)
    for (const Tensor& second : {b, bt}) {
      Tensor sum = native::binary(native::BinaryOp::Add, a, second);
      Tensor want = native::unary(native::UnaryOp::Relu, sum);
      Tensor got = native::add_relu(a, second);
      CHECK(got.is_contiguous());
      CHECK(got.sizes() == a.sizes());
      CHECK(got.dtype() == dtype);
      const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
      CHECK(g == w);
      CHECK(std::count(g.begin(), g.end(), 0.0) > 0);  // both sides of the ReLU occur
    }
  }
}

TEST_CASE("add_relu: mismatched shapes or dtypes are an error that names the fallback") {
  std::string msg;
  try {
    native::add_relu(ls::randn({2, 3}), ls::randn({3}));
  } catch (const ls::Error& e) {
    msg = e.what();
  }
  CHECK(msg.find("add_relu: expected two tensors of the same shape and dtype") !=
        std::string::npos);
  CHECK(msg.find("(a + b).relu()") != std::string::npos);
}
