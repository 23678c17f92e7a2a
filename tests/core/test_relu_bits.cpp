// tests/core/test_relu_bits.cpp — Note [bfloat16 ReLU on bits] (core/native/unary.cpp)
// on every bf16 pattern: relu(x) and relu_backward(g, x) computed on the 16-bit
// patterns equal the float32 ops on the widened values, rounded once, bit for bit —
// all 65536 x (both signs of 0, subnormals, infinities, signalling and quiet NaNs)
// against gradients that include NaNs to quiet.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "core/factory.h"
#include "core/native/native.h"
#include "core/tensor.h"

namespace ls = lockstep;
namespace nv = lockstep::native;

namespace {

ls::Tensor bf16_of_bits(const std::vector<uint16_t>& bits) {
  ls::Tensor t = nv::empty({static_cast<int64_t>(bits.size())}, ls::kBFloat16);
  ls::BFloat16* p = t.data_ptr<ls::BFloat16>();
  for (size_t i = 0; i < bits.size(); ++i) p[i].bits = bits[i];
  return t;
}

// The number of elements whose bits differ.
int64_t differing(const ls::Tensor& a, const ls::Tensor& b) {
  const ls::BFloat16* pa = a.data_ptr<ls::BFloat16>();
  const ls::BFloat16* pb = b.data_ptr<ls::BFloat16>();
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i) n += pa[i].bits != pb[i].bits;
  return n;
}

}  // namespace

TEST_CASE("bf16 ReLU on bits: every x pattern, relu and relu_backward equal float32 rounded once") {
  std::vector<uint16_t> xs(65536), gs(65536);
  const uint16_t g_patterns[] = {0x3f80, 0xbf80, 0x7f81, 0xffc0, 0x0001, 0x8000, 0x7f80, 0x4049};
  for (uint32_t i = 0; i < 65536; ++i) {
    xs[i] = static_cast<uint16_t>(i);
    gs[i] = g_patterns[(i * 7) % 8];
  }
  const ls::Tensor x = bf16_of_bits(xs), g = bf16_of_bits(gs);
  const ls::Tensor x32 = nv::to_dtype(x, ls::kFloat32), g32 = nv::to_dtype(g, ls::kFloat32);
  CHECK(differing(nv::unary(nv::UnaryOp::Relu, x),
                  nv::to_dtype(nv::unary(nv::UnaryOp::Relu, x32), ls::kBFloat16)) == 0);
  CHECK(differing(nv::relu_backward(g, x),
                  nv::to_dtype(nv::relu_backward(g32, x32), ls::kBFloat16)) == 0);
}
