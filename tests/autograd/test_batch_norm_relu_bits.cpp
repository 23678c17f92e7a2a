// tests/autograd/test_batch_norm_relu_bits.cpp — Note [ReLU mask in bits]
// (autograd/functions/batch_norm.cpp): batch_norm_add_relu on a channels-last
// bfloat16 input keeps its ReLU mask as bits, and the backward that reads them
// gives the gradients of the plain reference (the backward that reads the
// output) bit for bit: the bit is y > 0 of the stored bf16 output, so the two
// masks are the same set and the kernels run the same float operations. No
// tolerance: every comparison here is of bits.
// Also: the bytes the profiler counts (Note [Profiler bytes]) — the node reads
// ceil(C / 16) 16-bit words a pixel instead of the output — and the errors for
// a mask that does not fit. Registered a second time with
// LOCKSTEP_BF16_RELU_BITS=0 (tests/CMakeLists.txt), where the op saves the
// output again and the same gradients come out.
//
// Read before: autograd/functions/batch_norm.cpp, core/native/fused_relu.h.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "core/factory.h"
#include "core/native/fused_relu.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/nn_ops.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "tests/support/profiler_rows.h"
#include "tests/support/compare.h"

namespace ls = lockstep;
namespace nv = lockstep::native;
using ls::testing::same_bits;  // tests/support/compare.h

namespace {

// A channels-last bf16 (N, C, H, W) tensor of scale * randn + offset.
ls::Tensor cl_bf16(const ls::IntList& sizes, double scale = 1.0, double offset = 0.0) {
  return nv::channels_last(nv::to_dtype(ls::randn(sizes) * scale + offset, ls::kBFloat16));
}

bool bits_on() {
  const char* v = std::getenv("LOCKSTEP_BF16_RELU_BITS");
  return v == nullptr || std::string(v) != "0";
}

// C a multiple of 16 or not (the last word partly used), a few pixels or many (an
// H = W = 1 input is also contiguous and takes the NCHW kernel, which writes no bits).
const ls::IntList kShapes[] = {{2, 3, 5, 7}, {4, 21, 9, 9}, {8, 64, 14, 14}, {2, 40, 1, 3}};

}  // namespace

TEST_CASE("batch_norm_add_relu bits: the mask is out > 0, the gradients are the output mask's") {
  for (const auto& shape : kShapes) {
    const int64_t c = shape[1], rows = shape[0] * shape[2] * shape[3];
    CAPTURE(c);
    CAPTURE(rows);
    const ls::Tensor x = cl_bf16(shape, 2.0, 0.5), r = cl_bf16(shape);
    const ls::Tensor w = ls::randn({c}), b = ls::randn({c});
    ls::Tensor rm = ls::zeros({c}), rv = ls::ones({c});
    ls::Tensor rm2 = ls::zeros({c}), rv2 = ls::ones({c});
    ls::Tensor bits;
    auto [out, mean, invstd] =
        nv::batch_norm_add_relu_forward(x, r, w, b, rm, rv, true, 0.1, 1e-5, &bits);
    auto [ref_out, ref_mean, ref_invstd] =
        nv::batch_norm_add_relu_forward(x, r, w, b, rm2, rv2, true, 0.1, 1e-5);
    CHECK(same_bits(out, ref_out));
    CHECK(same_bits(mean, ref_mean));
    CHECK(same_bits(rm, rm2));
    REQUIRE(bits.defined());
    REQUIRE(bits.sizes() == ls::IntList{rows, 2 * ((c + 15) / 16)});
    // Bit ch % 16 of word ch / 16 of pixel p is out[p, ch] > 0 (out's memory is (R, C)).
    const auto* y = out.data_ptr<ls::BFloat16>();
    const auto* words = reinterpret_cast<const uint16_t*>(bits.data_ptr<uint8_t>());
    const int64_t per_row = (c + 15) / 16;
    int64_t wrong = 0, live = 0;
    for (int64_t p = 0; p < rows; ++p) {
      for (int64_t ch = 0; ch < per_row * 16; ++ch) {
        const bool bit = ((words[p * per_row + ch / 16] >> (ch % 16)) & 1u) != 0;
        const bool want = ch < c && static_cast<float>(y[p * c + ch]) > 0.0f;
        wrong += bit != want ? 1 : 0;
        live += want ? 1 : 0;
      }
    }
    CHECK(wrong == 0);
    CHECK(live > 0);
    CHECK(live < rows * c);  // both sides of the ReLU are exercised
    const ls::Tensor gy = cl_bf16(shape);
    for (const bool need_input : {true, false}) {
      auto [gi, gw, gb, gr] = nv::batch_norm_add_relu_backward_bits(
          gy, x, w, mean, invstd, bits, true, need_input, true, true);
      auto [rgi, rgw, rgb, rgr] = nv::batch_norm_add_relu_backward(
          gy, x, w, mean, invstd, out, true, need_input, true, true);
      CHECK(gi.defined() == need_input);
      if (need_input) CHECK(same_bits(gi, rgi));
      CHECK(same_bits(gw, rgw));
      CHECK(same_bits(gb, rgb));
      CHECK(same_bits(gr, rgr));
    }
  }
}

TEST_CASE("batch_norm_add_relu bits: values that round to 0 in bf16 are masked as the output is") {
  // w = b = 3e-41 make y = x * scale + shift float32 subnormals of size
  // ~1e-40, around half of bf16's smallest subnormal 2^-133 (9.2e-41): positive
  // values of which some round to 0 in bf16 and some to 2^-133. The bit must be
  // that of the stored bf16 value (0 is masked), not of the float.
  const ls::IntList shape{1, 16, 4, 4};
  const ls::Tensor x = cl_bf16(shape);
  const ls::Tensor w = ls::full({16}, 3e-41), b = ls::full({16}, 3e-41);
  const ls::Tensor r = nv::channels_last(nv::to_dtype(ls::zeros(shape), ls::kBFloat16));
  ls::Tensor rm = ls::zeros({16}), rv = ls::ones({16}), bits;
  auto [out, mean, invstd] =
      nv::batch_norm_add_relu_forward(x, r, w, b, rm, rv, true, 0.1, 1e-5, &bits);
  const ls::Tensor gy = cl_bf16(shape);
  auto [gi, gw, gb, gr] =
      nv::batch_norm_add_relu_backward_bits(gy, x, w, mean, invstd, bits, true, true, true, true);
  auto [rgi, rgw, rgb, rgr] =
      nv::batch_norm_add_relu_backward(gy, x, w, mean, invstd, out, true, true, true, true);
  CHECK(same_bits(gr, rgr));
  CHECK(same_bits(gi, rgi));
  CHECK(same_bits(gw, rgw));
}

TEST_CASE("batch_norm_add_relu bits: the autograd op's gradients and the bytes its node reads") {
  const ls::IntList shape{4, 40, 6, 6};
  const int64_t c = 40, rows = 4 * 6 * 6, a = 4 * 40 * 6 * 6 * 2;  // a: one bf16 activation
  ls::Tensor x = cl_bf16(shape, 1.5, 0.2).requires_grad_();
  ls::Tensor r = cl_bf16(shape).requires_grad_();
  ls::Tensor w = ls::randn({c}).requires_grad_(), b = ls::randn({c}).requires_grad_();
  ls::Tensor rm = ls::zeros({c}), rv = ls::ones({c});
  const ls::Tensor gy = cl_bf16(shape);
  ls::profiler::reset();
  ls::profiler::enable();
  ls::Tensor out = ls::batch_norm_add_relu(x, r, w, b, rm, rv, true, 0.1, 1e-5);
  out.backward(gy);
  ls::profiler::disable();
  // The reference: the kernels with the output as the mask.
  ls::Tensor rm2 = ls::zeros({c}), rv2 = ls::ones({c});
  auto [ref_out, mean, invstd] = nv::batch_norm_add_relu_forward(
      x.detach(), r.detach(), w.detach(), b.detach(), rm2, rv2, true, 0.1, 1e-5);
  auto [gi, gw, gb, gr] = nv::batch_norm_add_relu_backward(gy, x.detach(), w.detach(), mean,
                                                            invstd, ref_out, true, true, true, true);
  CHECK(same_bits(out.detach(), ref_out));
  CHECK(same_bits(x.grad(), gi));
  CHECK(same_bits(r.grad(), gr));
  CHECK(same_bits(w.grad(), gw));
  CHECK(same_bits(b.grad(), gb));
  const int64_t mask_bytes = bits_on() ? rows * 2 * ((c + 15) / 16) : 0;
  const int64_t saved_mask = bits_on() ? mask_bytes : a;  // what the node unpacks for the ReLU
  const auto entries = ls::profiler::entries();
  const auto* fwd = ls::testing::find_entry(entries, "batch_norm_add_relu");
  const auto* bwd = ls::testing::find_entry(entries, "BatchNormAddReluBackward");
  REQUIRE(fwd != nullptr);
  REQUIRE(bwd != nullptr);
  // forward: x, r, w, b read; the output and the bits written
  CHECK(fwd->self_mb == doctest::Approx((3 * a + 2 * 4 * c + mask_bytes) * 1e-6));
  // backward: g, x, w, mean, invstd and the mask read; gi, gw, gb, gr written
  CHECK(bwd->self_mb == doctest::Approx((4 * a + 5 * 4 * c + saved_mask) * 1e-6));
}

TEST_CASE("batch_norm_add_relu bits: a mask that does not fit the input is refused") {
  const ls::IntList shape{2, 20, 3, 3};
  const ls::Tensor x = cl_bf16(shape), r = cl_bf16(shape), gy = cl_bf16(shape);
  ls::Tensor rm = ls::zeros({20}), rv = ls::ones({20}), bits;
  auto [out, mean, invstd] = nv::batch_norm_add_relu_forward(x, r, ls::Tensor(), ls::Tensor(), rm,
                                                             rv, true, 0.1, 1e-5, &bits);
  REQUIRE(bits.defined());
  CHECK_THROWS_WITH_AS(
      nv::batch_norm_add_relu_backward_bits(gy, x, ls::Tensor(), mean, invstd,
                                            nv::narrow(bits, 0, 0, 9), true, true, true, true),
      doctest::Contains("the ReLU's bit mask must be the (18, 4) uint8 tensor"), ls::Error);
  // An NCHW input: no bits are written, and the bits backward names the other one.
  const ls::Tensor xn = nv::contiguous(nv::to_dtype(ls::randn(shape), ls::kBFloat16));
  ls::Tensor none;
  nv::batch_norm_add_relu_forward(xn, nv::contiguous(r), ls::Tensor(), ls::Tensor(), rm, rv, true,
                                  0.1, 1e-5, &none);
  CHECK_FALSE(none.defined());
  CHECK_THROWS_WITH_AS(
      nv::batch_norm_add_relu_backward_bits(nv::contiguous(gy), xn, ls::Tensor(), mean, invstd,
                                            bits, true, true, true, true),
      doctest::Contains("use batch_norm_add_relu_backward with the forward's output"), ls::Error);
}
