// core/native/fast/batch_norm_bf16_nhwc_rows.h — the row loops of the channels-last
// bfloat16 batch-norm kernels, shared by the one-input kernels
// (batch_norm_bf16_nhwc.cpp) and the pair that folds a residual's batch norm in
// (batch_norm_bf16_nhwc_pair.cpp).
//
// An (N, C, H, W) channels-last bf16 buffer is an (R, C) row-major matrix, R = N H W
// (Note [bfloat16 batch norm on channels-last activations] in batch_norm_bf16_nhwc.cpp):
// every loop here walks rows [lo, hi) of such matrices 16 (or 8) channels at a time
// in fast/bf16_lanes.h's registers. What they compute, per row:
//   shifted_sums_rows    the forward's statistics sums (x - K, (x - K)^2)
//   forward_rows         y = x * scale + shift, + residual, ReLU, the mask bits
//   grad_sums_rows       the backward's sums (gm, gm * (x - mean)), gm stored if asked
//   grad_input_rows      dx = a * gm + bx * x + c0
//   add_bn_relu_rows     the pair's forward (its backward: the two above with Pair)
// and batch_statistics runs the whole statistics pass of one input; affine_of and
// grad_coefficients turn statistics and sums into the loops' per-channel coefficients.
//
// Read before: core/native/fast/batch_norm_bf16_nhwc.cpp (the Note), core/native/fast/bf16_lanes.h,
// core/native/batch_norm_sums.h. Read next: core/native/fast/batch_norm_bf16_nhwc_pair.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/native/batch_norm_sums.h"
#include "core/native/fast/bf16_lanes.h"
#include "core/native/memory_format.h"
#include "core/tensor.h"

namespace lockstep::native::nhwc_bn {

using namespace batch_norm_detail;  // core/native/batch_norm_sums.h

// Rows per statistics block (Note [bfloat16 batch norm on channels-last
// activations] in batch_norm_bf16_nhwc.cpp); also the elementwise pass's grain.
constexpr int64_t kRows = 256;

inline float& at(const Tensor& t, int64_t i) { return t.data_ptr<float>()[i * t.stride(0)]; }

// out[k] = sum over blocks b, in order, of part[b * c + k], in double.
inline std::vector<double> combine(const std::vector<float>& part, int64_t blocks, int64_t c) {
  std::vector<double> out(static_cast<size_t>(c), 0.0);
  for (int64_t b = 0; b < blocks; ++b) {
    const float* p = part.data() + b * c;
    for (int64_t k = 0; k < c; ++k) out[static_cast<size_t>(k)] += p[k];
  }
  return out;
}

// Adds d = x - k0 and d^2 of rows [lo, hi) of x (R, C) to the column sums sum,
// sum_sq (C); k0 (C): the shifts.
inline void shifted_sums_rows(const BFloat16* x, int64_t lo, int64_t hi, int64_t c, const float* k0,
                       float* sum, float* sum_sq) {
  using namespace lanes;
  for (int64_t r = lo; r < hi; ++r) {
    const BFloat16* xr = x + r * c;
    for (int64_t j = 0; j < c; j += kLanes) {
      const K k = first(c - j);
      const F d = sub(load(xr + j, k), load(k0 + j, k));
      store(sum + j, k, add(load(sum + j, k), d));
      store(sum_sq + j, k, fma(d, d, load(sum_sq + j, k)));
    }
  }
}

// Rows [lo, hi) of y = fma(x, scale, shift), then + residual and / or max(., 0)
// (the NCHW kernel's expressions); x, res, y (R, C), scale and shift (C). With
// Bits, also the ReLU's mask y > 0 of the stored (rounded) y into bits (R,
// bit_words(C)) (Note [ReLU mask in bits] in autograd/functions/batch_norm.cpp).
enum class Form { Plain, Relu, AddRelu };
template <Form Fm, bool Bits = false>
void forward_rows(const BFloat16* x, const BFloat16* res, BFloat16* y, uint16_t* bits, int64_t lo,
                  int64_t hi, int64_t c, const float* scale, const float* shift) {
  using namespace lanes;
  const int64_t words = bit_words(c);
  for (int64_t r = lo; r < hi; ++r) {
    const int64_t o = r * c;
    for (int64_t j = 0; j < c; j += kLanes) {
      const K k = first(c - j);
      F v = fma(load(x + o + j, k), load(scale + j, k), load(shift + j, k));
      if constexpr (Fm == Form::AddRelu) v = relu(add(v, load(res + o + j, k)));
      if constexpr (Fm == Form::Relu) v = relu(v);
      if constexpr (Bits) {  // y > 0 of the value stored, as Mask::Output reads it
        v = round_trip(v);
        store_bits(bits + r * words, j, positive(k, v));
      }
      store(y + o + j, k, v);
    }
  }
}

// The backward's operands, (R, C) bf16 or (C) float32 per-channel constants:
// scale, shift the forward's (Mask::Input), mean the saved one as float, and
// dx = a * gm + bx * x + c0 (grad_input_coefficients). Built once by the
// backward and passed by reference, never copied:
//
// § Note [Row-kernel operands by reference]
// The row kernels take Operands by const reference and the parallel_for
// lambdas capture it by reference: no copy of it is made. With a by-value
// copy, GCC 12 (-O2 -march=native, AVX-512) moved the 96-byte struct in one
// 64-byte and one 32-byte vector move and gave the copy 64-byte alignment for
// an aligned `vmovdqa64`. The asan-ubsan preset runs with
// detect_stack_use_after_return=1, which puts such a frame on
// AddressSanitizer's fake stack, where GCC 12 aligns the frame's variables to
// 32 bytes only: the aligned store faulted, and ASan reported a SEGV near
// address 0 in grad_input_rows (Mask::Input and Mask::Bits). Nothing was
// out of bounds, and frames on the real stack (Release; ASan without fake
// stacks) are realigned. Check, on the object built with the asan preset's
// flags: `objdump -d | grep -E 'vmov(dqa64|aps)\s+%zmm.*\)'` finds no aligned
// 64-byte store (12 with the copies). tests/core/test_batch_norm_bf16_nhwc.cpp
// runs both passes on 1 and 2 threads against the NCHW kernel.
struct Operands {
  const BFloat16 *g, *x, *y;
  const float *scale, *shift, *mean, *a, *bx, *c0;
  const uint16_t* bits;  // Mask::Bits: (R, words) the forward's mask
  int64_t words;
  // The pair only (batch_norm_bf16_nhwc_pair.cpp): the residual's input r (R, C) and its
  // mean and dr = ra * gm + rbx * r + rc0 coefficients (C).
  const BFloat16* r = nullptr;
  const float *r_mean = nullptr, *ra = nullptr, *rbx = nullptr, *rc0 = nullptr;
};

// gm: g, or 0 where the fused ReLU's output is 0 (mask M: y <= 0, a 0 bit, or
// fma(x, scale, shift) <= 0), for the lanes k of the values at o + j of row r.
template <Mask M>
lanes::F masked_g(const Operands& p, int64_t r, int64_t o, int64_t j, lanes::K k, lanes::F vx) {
  using namespace lanes;
  K live = k;
  if constexpr (M == Mask::Output) live = positive(k, load(p.y + o + j, k));
  if constexpr (M == Mask::Bits) live = load_bits(p.bits + r * p.words, j, k);
  if constexpr (M == Mask::Input) {
    live = positive(k, fma(vx, load(p.scale + j, k), load(p.shift + j, k)));
  }
  return keep(live, load(p.g + o + j, k));
}

// Adds gm and gm * (x - mean) of rows [lo, hi) to the column sums sum_g,
// sum_g_xmu (C); with gm_out not null, stores gm there (exact in bf16). Pair (the
// pair's backward): also gm * (r - r_mean) into sum_g_rmu, the expression r's own
// batch norm would sum.
template <Mask M, bool Pair = false>
void grad_sums_rows(const Operands& p, BFloat16* gm_out, int64_t lo, int64_t hi, int64_t c,
                    float* sum_g, float* sum_g_xmu, float* sum_g_rmu = nullptr) {
  using namespace lanes;
  for (int64_t r = lo; r < hi; ++r) {
    const int64_t o = r * c;
    for (int64_t j = 0; j < c; j += kLanes) {
      const K k = first(c - j);
      const F vx = load(p.x + o + j, k);
      const F gm = masked_g<M>(p, r, o, j, k, vx);
      if (gm_out != nullptr) store(gm_out + o + j, k, gm);
      store(sum_g + j, k, add(load(sum_g + j, k), gm));
      store(sum_g_xmu + j, k, fma(gm, sub(vx, load(p.mean + j, k)), load(sum_g_xmu + j, k)));
      if constexpr (Pair) {
        const F vr = load(p.r + o + j, k);
        store(sum_g_rmu + j, k, fma(gm, sub(vr, load(p.r_mean + j, k)), load(sum_g_rmu + j, k)));
      }
    }
  }
}

// Rows [lo, hi) of dx = a * gm + bx * x + c0 (R, C). Pair: dx may be null (not
// asked for), and dr = ra * gm + rbx * r + rc0 goes to dr unless it is null.
template <Mask M, bool Pair = false>
void grad_input_rows(const Operands& p, BFloat16* dx, int64_t lo, int64_t hi, int64_t c,
                     BFloat16* dr = nullptr) {
  using namespace lanes;
  for (int64_t r = lo; r < hi; ++r) {
    const int64_t o = r * c;
    for (int64_t j = 0; j < c; j += kLanes) {
      const K k = first(c - j);
      const F vx = load(p.x + o + j, k);
      const F gm = masked_g<M>(p, r, o, j, k, vx);
      if (!Pair || dx != nullptr) {
        const F bx_c0 = fma(load(p.bx + j, k), vx, load(p.c0 + j, k));
        store(dx + o + j, k, fma(load(p.a + j, k), gm, bx_c0));
      }
      if constexpr (Pair) {
        if (dr != nullptr) {
          const F rbx_c0 = fma(load(p.rbx + j, k), load(p.r + o + j, k), load(p.rc0 + j, k));
          store(dr + o + j, k, fma(load(p.ra + j, k), gm, rbx_c0));
        }
      }
    }
  }
}

// The pair's rows (Note [Downsample batch norm folded] in batch_norm_bf16_nhwc_pair.cpp).
// Forward: y = max(x * scale + shift + (r * rscale + rshift), 0), and its mask bits
// as forward_rows<AddRelu, true> writes them when bits is not null.
template <bool Bits>
void add_bn_relu_rows(const BFloat16* x, const BFloat16* r, BFloat16* y, uint16_t* bits, int64_t lo,
                      int64_t hi, int64_t c, const float* scale, const float* shift,
                      const float* rscale, const float* rshift) {
  using namespace lanes;
  const int64_t words = bit_words(c);
  for (int64_t row = lo; row < hi; ++row) {
    const int64_t o = row * c;
    for (int64_t j = 0; j < c; j += kLanes) {
      const K k = first(c - j);
      const F vr = fma(load(r + o + j, k), load(rscale + j, k), load(rshift + j, k));
      F v = relu(add(fma(load(x + o + j, k), load(scale + j, k), load(shift + j, k)), vr));
      if constexpr (Bits) {
        v = round_trip(v);
        store_bits(bits + row * words, j, positive(k, v));
      }
      store(y + o + j, k, v);
    }
  }
}

// f.template operator()<M>() for the mask chosen at run time.
template <class F>
void with_mask(Mask mask, F&& f) {
  if (mask == Mask::Output) {
    f.template operator()<Mask::Output>();
  } else if (mask == Mask::Bits) {
    f.template operator()<Mask::Bits>();
  } else if (mask == Mask::Input) {
    f.template operator()<Mask::Input>();
  } else {
    f.template operator()<Mask::None>();
  }
}

// The per-channel y = x * scale + shift of the forward (C each; w, b may be null).
inline void affine_of(const float* mean, const float* invstd, const float* w, const float* b,
                      int64_t c, float* scale, float* shift) {
  for (int64_t ch = 0; ch < c; ++ch) {
    const Affine<float> affine = affine_coefficients<float>(mean[ch], invstd[ch], w, b, ch);
    scale[ch] = affine.scale;
    shift[ch] = affine.shift;
  }
}

// From the backward's sums (C each; zeros where none were needed): the parameters'
// gradients (grad_weight, grad_bias, either may be null) and dx = a * gm + bx * x + c0's
// coefficients a, bx, c0 (C each; w may be null).
inline void grad_coefficients(const std::vector<double>& sum_g,
                              const std::vector<double>& sum_g_xmu, const float* w,
                              const float* mean, const float* invstd, int64_t rows, bool training,
                              float* grad_weight, float* grad_bias, float* a, float* bx,
                              float* c0) {
  const int64_t c = static_cast<int64_t>(sum_g.size());
  for (int64_t ch = 0; ch < c; ++ch) {
    const size_t i = static_cast<size_t>(ch);
    const double sum_g_xhat = sum_g_xmu[i] * static_cast<double>(invstd[ch]);
    if (grad_bias != nullptr) grad_bias[ch] = static_cast<float>(sum_g[i]);
    if (grad_weight != nullptr) grad_weight[ch] = static_cast<float>(sum_g_xhat);
    const GradInput<float> gi = grad_input_coefficients<float>(
        w != nullptr ? static_cast<double>(w[ch]) : 1.0, mean[ch], invstd[ch], sum_g[i], sum_g_xhat,
        rows, training);
    a[ch] = gi.a;
    bx[ch] = gi.bx;
    c0[ch] = gi.c0;
  }
}

inline void check_nhwc_input(const Tensor& input, const char* op) {
  LS_CHECK(is_channels_last(input) && input.dtype() == kBFloat16, op,
           ": the channels-last batch norm kernel takes a channels-last bfloat16 input, but got ",
           input.dtype(), " ", input.shape_str(),
           is_channels_last(input) ? " (channels-last)" : " (not channels-last)",
           "; call batch_norm_bf16_forward / _backward, which pick the kernel for the input's "
           "order and check its dtype");
}


// The statistics pass of one (R, C) input x (rows >= 2 when training): the batch's
// mean and invstd into mean and invstd (C) when training, updating running_mean
// and running_var (either may be undefined) with momentum in place; the running
// ones in eval. Defined in batch_norm_bf16_nhwc.cpp.
void batch_statistics(const BFloat16* x, int64_t rows, int64_t c, const Tensor& running_mean,
                      const Tensor& running_var, bool training, double momentum, double eps,
                      float* mean, float* invstd);

}  // namespace lockstep::native::nhwc_bn
