// tests/core/test_reference_conv.cpp — every convolution path against the plain
// loops of core/native/reference/conv2d.cpp (Note [Plain reference kernels]):
// float64 (im2col + GEMM), float32 on the im2col backend, on oneDNN (1x1 layers
// as GEMMs, the direct algorithm, Winograd forced), with 1 and 2 threads, and the
// bfloat16 kernels (1x1 GEMMs, the direct loops for few input channels, oneDNN's
// primitives, backward-weights as one GEMM, backward-data as a forward), forward,
// backward-data and backward-weights, on geometries that reach each of them.
//
// Tolerances, as max |fast - reference| / max |reference| (the reference is
// computed in double on the very values the fast path read):
//   float64  1e-12  (summation order only)
//   float32  5e-5   (Winograd's transforms; the direct paths measure ~1e-6,
//                    tests/core/test_conv_winograd.cpp)
//   bf16     8e-3   for results rounded to bf16 (one rounding: 2^-8 = 3.9e-3 relative
//                   to the element, at most twice that relative to the largest),
//            1e-4   for the float32 weight and bias gradients (float32 sums only)
// Read before: core/native/reference/reference.h, tests/core/test_conv.cpp.
// Read next: tests/core/test_reference_ops.cpp.
#include <doctest/doctest.h>

#include <vector>

#include "core/factory.h"
#include "core/native/conv_bf16.h"
#include "core/native/conv_geometry.h"
#include "core/native/fast/conv_onednn.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/native/reference/reference.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "tests/support/compare.h"

namespace ls = lockstep;
namespace nv = lockstep::native;
namespace ref = lockstep::native::reference;
using ls::Tensor;
using ls::testing::relative_error;

namespace {

struct Geometry {
  int64_t n, c_in, h, w, c_out, kh, kw;
  ls::IntList stride, pad, dil;
  int64_t groups;
  const char* reaches;
};

// Each reaches a path (in float32 / bf16) the others do not.
const Geometry kGeometries[] = {
    {2, 8, 9, 9, 16, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, "3x3: direct, Winograd when forced"},
    {2, 16, 6, 6, 8, 1, 1, {1, 1}, {0, 0}, {1, 1}, 1, "1x1 stride 1: GEMMs"},
    {2, 16, 8, 8, 8, 1, 1, {2, 2}, {0, 0}, {1, 1}, 1, "1x1 stride 2"},
    {1, 3, 15, 15, 8, 7, 7, {2, 2}, {3, 3}, {1, 1}, 1, "7x7 stem: bf16 direct loops"},
    {2, 8, 6, 7, 8, 3, 3, {1, 1}, {1, 1}, {1, 1}, 2, "grouped"},
    {2, 4, 9, 9, 4, 3, 3, {1, 1}, {2, 2}, {2, 2}, 1, "dilated"},
    {2, 4, 9, 8, 6, 5, 3, {2, 1}, {2, 1}, {1, 1}, 1, "non-square kernel and stride"},
    {2, 64, 14, 14, 16, 3, 3, {2, 2}, {1, 1}, {1, 1}, 1, "3x3 stride 2 over 64: bf16 dW GEMM"},
};

// Restores the process-wide backend, Winograd mode and thread count.
struct ModeGuard {
  nv::ConvBackend backend = nv::conv_backend();
  nv::ConvWinograd winograd = nv::conv_winograd();
  int threads = ls::get_num_threads();
  ~ModeGuard() {
    nv::set_conv_backend(backend);
    nv::set_conv_winograd(winograd);
    ls::set_num_threads(threads);
  }
};

struct Operands {
  Tensor x, w, b, gy;
};

Operands random_operands(const Geometry& c, const nv::ConvGeometry& g, ls::ScalarType dtype) {
  return {ls::randn({c.n, c.c_in, c.h, c.w}, dtype),
          ls::randn({c.c_out, c.c_in / c.groups, c.kh, c.kw}, dtype), ls::randn({c.c_out}, dtype),
          ls::randn({g.n, g.c_out, g.oh, g.ow}, dtype)};
}

nv::ConvGeometry geometry_of(const Geometry& c, const Tensor& x, const Tensor& w) {
  return nv::make_conv_geometry(x, w, Tensor(), c.stride, c.pad, c.dil, c.groups, "test");
}

// conv2d_forward / conv2d_backward (all three passes) in the current mode against the loops.
void check_native(const Geometry& c, ls::ScalarType dtype, double tol) {
  const nv::ConvGeometry g =
      geometry_of(c, ls::zeros({c.n, c.c_in, c.h, c.w}, dtype),
                  ls::zeros({c.c_out, c.c_in / c.groups, c.kh, c.kw}, dtype));
  const Operands o = random_operands(c, g, dtype);
  const Tensor y = nv::conv2d_forward(o.x, o.w, o.b, c.stride, c.pad, c.dil, c.groups);
  CHECK(relative_error(y, ref::conv2d_forward(g, o.x, o.w, o.b)) < tol);
  auto [gx, gw, gb] =
      nv::conv2d_backward(o.gy, o.x, o.w, c.stride, c.pad, c.dil, c.groups, true, true, true);
  auto [rgw, rgb] = ref::conv2d_backward_weights(g, o.gy, o.x);
  CHECK(relative_error(gx, ref::conv2d_backward_data(g, o.gy, o.w)) < tol);
  CHECK(relative_error(gw, rgw) < tol);
  CHECK(relative_error(gb, rgb) < tol);
}

}  // namespace

TEST_CASE("reference conv2d: float64 and every float32 backend, threads and Winograd mode") {
  ModeGuard guard;
  ls::manual_seed(11);
  for (const Geometry& c : kGeometries) {
    CAPTURE(c.reaches);
    nv::set_conv_backend(nv::ConvBackend::Reference);
    check_native(c, ls::kFloat64, 1e-12);
    check_native(c, ls::kFloat32, 5e-5);
    nv::set_conv_backend(nv::ConvBackend::OneDNN);
    for (int threads : {1, 2}) {
      ls::set_num_threads(threads);
      for (nv::ConvWinograd mode : {nv::ConvWinograd::Off, nv::ConvWinograd::Force}) {
        CAPTURE(nv::conv_winograd_name(mode));
        nv::set_conv_winograd(mode);
        check_native(c, ls::kFloat32, 5e-5);
      }
    }
  }
}

TEST_CASE("reference conv2d: the bf16 kernels on bf16 values") {
  ls::manual_seed(12);
  for (const Geometry& c : kGeometries) {
    CAPTURE(c.reaches);
    const Tensor x = nv::to_dtype(ls::randn({c.n, c.c_in, c.h, c.w}), ls::kBFloat16);
    const Tensor w =
        nv::to_dtype(ls::randn({c.c_out, c.c_in / c.groups, c.kh, c.kw}), ls::kBFloat16);
    const Tensor b = ls::randn({c.c_out});  // float32, as autocast passes it
    const nv::ConvGeometry g = geometry_of(c, x, w);
    CAPTURE(nv::conv2d_bf16_impl(g));
    nv::ConvBf16SavedInput saved;
    const Tensor y = nv::conv2d_bf16_forward(g, x, w, b, &saved);
    CHECK(relative_error(y, ref::conv2d_forward(g, x, w, b)) < 8e-3);
    const Tensor gy = nv::to_dtype(ls::randn(y.sizes()), ls::kBFloat16);
    auto [rgw, rgb] = ref::conv2d_backward_weights(g, gy, x);
    const Tensor rgx = ref::conv2d_backward_data(g, gy, w);
    for (ls::ScalarType gx_dtype : {ls::kFloat32, ls::kBFloat16}) {
      auto [gx, gw, gb] = nv::conv2d_bf16_backward(g, gy, saved, w, gx_dtype, true, true, true);
      CHECK(relative_error(gx, rgx) < 8e-3);  // rounded to bf16 before any widening
      CHECK(relative_error(gw, rgw) < 1e-4);
      CHECK(relative_error(gb, rgb) < 1e-4);
    }
  }
}
