// tests/core/test_add_relu.cpp — native::add_relu, max(a + b, 0) in one pass,
// against the unfused binary add and ReLU, on contiguous and strided inputs, and
// on an output large enough for streaming stores (Note [Streaming stores]).
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

TEST_CASE("add_relu: outputs above kStreamingBytes (streaming stores) equal relu(a + b)") {
  // 4.3M floats, above kStreamingBytes (Note [Streaming stores]); an odd count, so
  // the last chunk ends in a partial vector. The sum is rounded once either way.
  ls::manual_seed(22);
  Tensor a = ls::randn({3, 1031, 1399}), b = ls::randn({3, 1031, 1399});
  Tensor want = native::unary(native::UnaryOp::Relu, native::binary(native::BinaryOp::Add, a, b));
  const std::vector<double> g = native::add_relu(a, b).to_vector<double>();
  const std::vector<double> w = want.to_vector<double>();
  CHECK(g == w);
  CHECK(std::count(g.begin(), g.end(), 0.0) > 0);
  // The backward: the gradient where the output is positive, as relu_backward.
  Tensor y = native::add_relu(a, b), gy = ls::randn(y.sizes());
  CHECK(native::add_relu_backward(gy, y).to_vector<double>() ==
        native::relu_backward(gy, y).to_vector<double>());
}

TEST_CASE("add_relu_backward: equals relu_backward on small and strided tensors") {
  ls::manual_seed(23);
  for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64}) {
    const auto opts = ls::TensorOptions().dtype(dtype);
    Tensor y = native::add_relu(ls::randn({3, 8, 5, 7}, opts), ls::randn({3, 8, 5, 7}, opts));
    Tensor gt = ls::randn({3, 8, 7, 5}, opts).transpose(2, 3);  // non-contiguous (3, 8, 5, 7)
    for (const Tensor& g : {ls::randn(y.sizes(), opts), gt}) {
      const std::vector<double> got = native::add_relu_backward(g, y).to_vector<double>();
      CHECK(got == native::relu_backward(g, y).to_vector<double>());
      CHECK(std::count(got.begin(), got.end(), 0.0) > 0);
    }
  }
}
