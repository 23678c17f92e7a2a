// core/native/fused_dropout.cpp — dropout inside the pass of its neighbour: the
// residual add + LayerNorm of a post-norm transformer layer, and the GELU of its
// feed-forward. Each kernel computes, element for element, the arithmetic of the
// ops it replaces (dropout_add_forward then layer_norm_forward, gelu then
// dropout_forward, and their backwards), with the same rounding to bf16 at the same
// places, so the results are the same bits; only the tensors between the ops are
// never written.
//
// § Note [dropout masks kept as keys]
// A dropout mask is a function of one 64-bit key and the element's index (Note
// [Counter-based dropout masks] in core/native/dropout.cpp). These kernels keep the
// key (DropoutKey, core/native/dropout_key.h) instead of a bool tensor: forward asks
// it element by element while it writes its result, and backward asks it again.
// For BERT-base that is the 3 MB mask of each feed-forward dropout and the 0.8 MB
// of each residual's, written forward and read backward, gone; the price is the
// hash (a few integer multiplies an element) computed twice. The key is drawn at the
// point where the unfused dropout drew its own, so the masks are the same.
//
// Read before: core/native/fused_dropout.h, core/native/dropout_key.h,
// core/native/layer_norm_rows.h,
// core/native/gelu_math.h. Read next: autograd/functions/dropout_add_norm.cpp.
#include <algorithm>
#include <vector>

#include "core/native/bf16_rows.h"
#include "core/native/elementwise_loop.h"
#include "core/native/gelu_math.h"
#include "core/native/layer_norm_rows.h"
#include "core/native/layer_norm_rules.h"
#include "core/native/native.h"
#include "core/native/fused_dropout.h"

namespace lockstep::native {

namespace {

// Rows of d elements per parallel chunk: about kGrain elements.
int64_t rows_per_chunk(int64_t d) {
  return std::max<int64_t>(1, detail::kGrain / std::max<int64_t>(d, 1));
}

const float* float_data_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<float>() : nullptr;
}

void check_norm_operands(const Tensor& x, const IntList& normalized_shape, const Tensor& weight,
                         const Tensor& bias, const char* op) {
  rules::check_layer_norm(x, normalized_shape, weight, bias, op, [&] {
    LS_CHECK(x.device().is_cpu() && x.dtype() == kFloat32, op, ": takes a float32 CPU input, got ",
             dtype_name(x.dtype()));
  });
}

}  // namespace

DropoutAddNorm dropout_add_layer_norm_forward(const Tensor& x, const Tensor& y, double p,
                                              const IntList& normalized_shape,
                                              const Tensor& weight, const Tensor& bias,
                                              double eps, bool write_bf16) {
  constexpr const char* kOp = "dropout_add_layer_norm";
  check_norm_operands(x, normalized_shape, weight, bias, kOp);
  LS_CHECK(y.defined() && y.device().is_cpu() && y.dtype() == kBFloat16 && y.sizes() == x.sizes(),
           kOp, ": y must be a bfloat16 CPU tensor of x's shape ", x.shape_str());
  LS_CHECK(p >= 0.0 && p <= 1.0, kOp, ": dropout probability has to be between 0 and 1, but got ",
           p);
  const int64_t d = rules::row_length(normalized_shape), m = rules::num_rows(x, normalized_shape);
  const Tensor xc = contiguous(x), yc = contiguous(y);  // (M, D)
  const Tensor w = weight.defined() ? contiguous(weight) : Tensor();
  const Tensor b = bias.defined() ? contiguous(bias) : Tensor();
  DropoutAddNorm r;
  r.key = draw_dropout_key(p);  // where dropout_add_forward draws its mask's key
  r.h = empty(x.sizes(), kFloat32);
  r.out = empty(x.sizes(), kFloat32);
  r.mean = empty({m}, kFloat32);
  r.rstd = empty({m}, kFloat32);
  if (write_bf16) r.out16 = empty(x.sizes(), kBFloat16);
  const float* xp = xc.data_ptr<float>();
  const BFloat16* yp = yc.data_ptr<BFloat16>();
  const float *wp = float_data_or_null(w), *bp = float_data_or_null(b);
  float *hp = r.h.data_ptr<float>(), *op = r.out.data_ptr<float>();
  float *mp = r.mean.data_ptr<float>(), *rp = r.rstd.data_ptr<float>();
  BFloat16* o16 = write_bf16 ? r.out16.data_ptr<BFloat16>() : nullptr;
  const uint64_t key = r.key.key, threshold = r.key.threshold;
  const float s = r.key.scale;
  parallel_for(0, m, rows_per_chunk(d), [=](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t base = i * d;
      float* hrow = hp + base;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) {  // dropout_add_forward's element
        const float v = static_cast<float>(yp[base + j]) * s;
        const bool kept = dropout_keeps(key, threshold, base + j);
        hrow[j] = xp[base + j] + rounded_to_bf16(kept ? v : 0.0f);
      }
      layer_norm_row(hrow, op + base, d, wp, bp, eps, mp[i], rp[i]);  // the row still in cache
      if (o16 != nullptr) round_to_bf16(op + base, o16 + base, d);     // and so is out's
    }
  });
  return r;
}

std::tuple<Tensor, Tensor, Tensor, Tensor> dropout_add_layer_norm_backward(
    const Tensor& grad, const Tensor& h, const IntList& normalized_shape, const Tensor& mean,
    const Tensor& rstd, const Tensor& weight, const DropoutKey& key, bool need_x, bool need_y,
    bool need_weight, bool need_bias) {
  constexpr const char* kOp = "dropout_add_layer_norm_backward";
  check_norm_operands(h, normalized_shape, weight, Tensor(), kOp);
  rules::check_backward_grad(grad, h, kOp);
  const int64_t d = rules::row_length(normalized_shape), m = rules::num_rows(h, normalized_shape);
  rules::check_backward_stats(mean, rstd, m, kOp);
  const Tensor g = contiguous(to_dtype(grad, kFloat32)), hc = contiguous(h);  // (M, D)
  const Tensor mu = contiguous(mean), rs = contiguous(rstd);                   // (M)
  const Tensor w = weight.defined() ? contiguous(weight) : Tensor();
  Tensor dx, dy, dw, db;
  if (need_x) dx = empty(h.sizes(), kFloat32);
  if (need_y) dy = empty(h.sizes(), kBFloat16);
  if (need_weight && weight.defined()) dw = empty(normalized_shape, kFloat32);
  if (need_bias) db = empty(normalized_shape, kFloat32);
  const float *gp = g.data_ptr<float>(), *hp = hc.data_ptr<float>();
  const float *mp = mu.data_ptr<float>(), *rp = rs.data_ptr<float>(), *wp = float_data_or_null(w);
  float* dxp = need_x ? dx.data_ptr<float>() : nullptr;
  BFloat16* dyp = need_y ? dy.data_ptr<BFloat16>() : nullptr;
  if (need_x || need_y) {
    const uint64_t k = key.key, threshold = key.threshold;
    const float s = key.scale;
    parallel_for(0, m, rows_per_chunk(d), [=](int64_t lo, int64_t hi) {
      std::vector<float> gy(static_cast<size_t>(d)), own(need_x ? 0 : static_cast<size_t>(d));
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t base = i * d;
        float* dxrow = need_x ? dxp + base : own.data();  // dL/dh = dL/dx
        layer_norm_row_backward(hp + base, gp + base, mp[i], rp[i], wp, gy.data(), dxrow, d);
        if (dyp == nullptr) continue;
        uint16_t* dyrow = reinterpret_cast<uint16_t*>(dyp + base);
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) {  // dropout_add_backward's element, the row in cache
          const float v = rounded_to_bf16(dxrow[j]) * s;
          dyrow[j] = BFloat16::round_bits(dropout_keeps(k, threshold, base + j) ? v : 0.0f);
        }
      }
    });
  }
  if (dw.defined() || db.defined()) {
    float* dwp = dw.defined() ? dw.data_ptr<float>() : nullptr;
    float* dbp = db.defined() ? db.data_ptr<float>() : nullptr;
    parallel_for(0, d, rows_per_chunk(m), [=](int64_t lo, int64_t hi) {  // a block of columns
      layer_norm_param_grads(hp, gp, mp, rp, m, d, lo, hi, dwp, dbp);
    });
  }
  return {dx, dy, dw, db};
}

// The loops below are written out, not passed as lambdas to a shared helper: GCC 12
// called such a lambda per element instead of vectorising it (3-10x slower steps).
Tensor gelu_dropout_forward(const Tensor& u, const DropoutKey& key) {
  LS_CHECK(u.defined() && u.device().is_cpu() && u.dtype() == kBFloat16,
           "gelu_dropout_forward: takes a bfloat16 CPU tensor");
  const Tensor uc = contiguous(u);
  Tensor out = empty(u.sizes(), kBFloat16);
  const BFloat16* up = uc.data_ptr<BFloat16>();
  uint16_t* yp = reinterpret_cast<uint16_t*>(out.data_ptr<BFloat16>());
  const uint64_t k = key.key, threshold = key.threshold;
  const float s = key.scale;
  parallel_for(0, u.numel(), detail::kGrain, [=](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      const float a = rounded_to_bf16(gelu_value(static_cast<float>(up[i])));  // gelu's bf16
      const float v = a * s;                                                   // dropout's
      yp[i] = BFloat16::round_bits(dropout_keeps(k, threshold, i) ? v : 0.0f);
    }
  });
  return out;
}

Tensor gelu_dropout_backward(const Tensor& grad, const Tensor& u, const DropoutKey& key) {
  LS_CHECK(grad.defined() && u.defined() && u.dtype() == kBFloat16 && grad.sizes() == u.sizes() &&
               grad.device().is_cpu() && u.device().is_cpu(),
           "gelu_dropout_backward: takes a CPU gradient and the bfloat16 u of its shape");
  const Tensor g = contiguous(to_dtype(grad, kBFloat16)), uc = contiguous(u);
  Tensor du = empty(u.sizes(), kBFloat16);
  const BFloat16 *gp = g.data_ptr<BFloat16>(), *up = uc.data_ptr<BFloat16>();
  uint16_t* dp = reinterpret_cast<uint16_t*>(du.data_ptr<BFloat16>());
  const uint64_t k = key.key, threshold = key.threshold;
  const float s = key.scale;
  parallel_for(0, u.numel(), detail::kGrain, [=](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      const float v = static_cast<float>(gp[i]) * s;  // dropout_backward's bf16 value
      const float dg = rounded_to_bf16(dropout_keeps(k, threshold, i) ? v : 0.0f);
      dp[i] = BFloat16::round_bits(gelu_grad(dg, static_cast<float>(up[i])));  // gelu_backward's
    }
  });
  return du;
}

}  // namespace lockstep::native
