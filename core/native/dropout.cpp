// core/native/dropout.cpp — inverted dropout: zero each element with probability p,
// scale the survivors by 1 / (1 - p).
//
// § Note [Counter-based dropout masks]
// The mask (bool, true = kept) is not drawn element by element from the default
// generator's sequential stream: that would run on one thread, a visible share
// of a BERT step (measured: docs/results/kernel_choices.md). Instead each call takes ONE 64-bit key from
// the default generator and element i keeps iff the top 32 bits of
// splitmix64(key + (i + 1) * golden) are below (1 - p) * 2^32. That is the
// SplitMix64 sequence of seed `key`, computed at any position independently, so
// the loop runs in parallel and vectorised, and the mask depends only on the key
// and i — not on the thread count. manual_seed(s) still fixes every mask, and
// ranks seeded alike drop the same elements. Scaling at training time ("inverted" dropout)
// keeps E[output] = input, so evaluation is the identity. The mask is returned
// for backward, which is the same product: dL/dx = g * mask / (1 - p).
// p == 1 drops everything; the scale is then taken as 0 rather than 1 / 0, so
// output and gradient are zeros, not NaNs (as in PyTorch).
//
// Read before: core/rng.h, core/factory.h. Read next: core/native/loss.cpp.
#include <algorithm>
#include <cmath>
#include <mutex>

#include "core/factory.h"
#include "core/native/cuda_dispatch.h"
#include "core/native/dropout_key.h"
#include "core/native/elementwise_loop.h"
#include "core/native/native.h"
#include "core/native/nn_kernels_transformer.h"
#include "core/rng.h"

namespace lockstep::native {

namespace {

void check_p(double p, const char* op) {
  LS_CHECK(p >= 0.0 && p <= 1.0, op, ": dropout probability has to be between 0 and 1, but got ",
           p);
}

// out = x * mask * scale elementwise over contiguous tensors of the same numel.
Tensor apply_mask(const Tensor& input, const Tensor& mask, double p, const char* op) {
  LS_CHECK(mask.dtype() == kBool && mask.sizes() == input.sizes(), op, ": mask ", mask.shape_str(),
           " (", dtype_name(mask.dtype()), ") must be a bool tensor of shape ", input.shape_str());
  const Tensor x = contiguous(input);
  const Tensor keep = contiguous(mask);
  Tensor out = empty(x.sizes(), x.dtype());
  const double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
  dispatch_floating_bf16(x.dtype(), op, [&]<class S, class T>() {  // S stored, T computed in
    const S* xp = x.data_ptr<S>();
    // The mask read as bytes (a bool is one byte, 0 or 1): GCC 12 does not vectorise bool loads.
    const uint8_t* kp = reinterpret_cast<const uint8_t*>(keep.data_ptr<bool>());
    S* yp = out.data_ptr<S>();
    const T s = static_cast<T>(scale);
    parallel_for(0, x.numel(), detail::kGrain, [&](int64_t lo, int64_t hi) {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) {
        const T v = static_cast<T>(xp[i]) * s;
        detail::store_element(yp[i], kp[i] != 0 ? v : T(0));
      }
    });
  });
  return out;
}

// out (bf16) = float32 input * mask * scale, rounded once: the values of apply_mask's
// float32 result converted, in one pass (dropout_forward_to).
Tensor apply_mask_to_bf16(const Tensor& input, const Tensor& mask, double p) {
  const Tensor x = contiguous(input);
  const uint8_t* kp = reinterpret_cast<const uint8_t*>(mask.data_ptr<bool>());
  Tensor out = empty(x.sizes(), kBFloat16);
  const float* xp = x.data_ptr<float>();
  BFloat16* yp = out.data_ptr<BFloat16>();
  const float s = static_cast<float>(p < 1.0 ? 1.0 / (1.0 - p) : 0.0);
  parallel_for(0, x.numel(), detail::kGrain, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      const float v = xp[i] * s;
      detail::store_element(yp[i], kp[i] != 0 ? v : 0.0f);
    }
  });
  return out;
}

}  // namespace

DropoutKey draw_dropout_key(double p) {
  DropoutKey k;
  {
    Generator& gen = default_generator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    k.key = gen.next_u64();
  }
  // keep iff (hash >> 32) < threshold; threshold 2^32 keeps everything (p == 0).
  k.threshold = static_cast<uint64_t>(std::ldexp(1.0 - p, 32));
  k.scale = static_cast<float>(p < 1.0 ? 1.0 / (1.0 - p) : 0.0);
  return k;
}

namespace {

// The bool mask (true = kept) of a dropout of `input` with probability p, from one
// key of the default generator: Note [Counter-based dropout masks].
Tensor draw_mask(const Tensor& input, double p) {
  LS_CHECK(input.defined(), "dropout: input is an undefined tensor");
  check_p(p, "dropout");
  LS_CHECK(input.is_floating_point(), "dropout: expected a floating input, got ",
           dtype_name(input.dtype()));
  const DropoutKey k = draw_dropout_key(p);
  // The mask first (the same for every dtype), then out = x * mask * scale: two
  // passes, each of which vectorises for float, double and bfloat16 alike.
  Tensor mask = empty(input.sizes(), kBool);
  bool* const kp = mask.data_ptr<bool>();
  parallel_for(0, mask.numel(), detail::kGrain, [&](int64_t lo, int64_t hi) {
    // Locals: read through the reference captures, they would be reloaded each iteration.
    const uint64_t key = k.key, t = k.threshold;
    bool* const m = kp;
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) m[i] = dropout_keeps(key, t, i);
  });
  return mask;
}

}  // namespace

std::tuple<Tensor, Tensor> dropout_forward(const Tensor& input, double p) {
  LS_DISPATCH_CUDA(input, dropout_forward(input, p));
  Tensor mask = draw_mask(input, p);
  Tensor out = apply_mask(input, mask, p, "dropout");
  return {out, mask};
}

std::tuple<Tensor, Tensor> dropout_forward_to(const Tensor& input, double p, ScalarType out_dtype) {
  LS_CHECK(input.defined() && input.device().is_cpu() && input.dtype() == kFloat32 &&
               out_dtype == kBFloat16,
           "dropout_forward_to: takes a float32 CPU input and writes bfloat16, got ",
           input.defined() ? dtype_name(input.dtype()) : "an undefined tensor", " -> ",
           dtype_name(out_dtype));
  Tensor mask = draw_mask(input, p);
  return {apply_mask_to_bf16(input, mask, p), mask};
}

std::tuple<Tensor, Tensor> dropout_add_forward(const Tensor& x, const Tensor& y, double p) {
  LS_CHECK(x.defined() && y.defined() && x.device().is_cpu() && y.device().is_cpu() &&
               x.dtype() == kFloat32 && y.dtype() == kBFloat16 && x.sizes() == y.sizes(),
           "dropout_add_forward: takes a float32 x and a bfloat16 y of the same shape on the CPU");
  Tensor mask = draw_mask(y, p);
  const Tensor xc = contiguous(x), yc = contiguous(y);
  Tensor h = empty(x.sizes(), kFloat32);  // (*): x + dropout(y)
  const float* xp = xc.data_ptr<float>();
  const BFloat16* yp = yc.data_ptr<BFloat16>();
  const uint8_t* kp = reinterpret_cast<const uint8_t*>(mask.data_ptr<bool>());
  float* hp = h.data_ptr<float>();
  const float s = static_cast<float>(p < 1.0 ? 1.0 / (1.0 - p) : 0.0);
  parallel_for(0, h.numel(), detail::kGrain, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      // dropout's bf16 value (apply_mask's rounding), then the float32 add
      const float d = static_cast<float>(yp[i]) * s;
      hp[i] = xp[i] + rounded_to_bf16(kp[i] != 0 ? d : 0.0f);
    }
  });
  return {h, mask};
}

Tensor dropout_add_backward(const Tensor& grad, const Tensor& mask, double p) {
  LS_CHECK(grad.defined() && grad.dtype() == kFloat32 && mask.dtype() == kBool &&
               mask.sizes() == grad.sizes(),
           "dropout_add_backward: takes a float32 gradient and the forward's bool mask");
  const Tensor g = contiguous(grad), keep = contiguous(mask);
  Tensor gy = empty(g.sizes(), kBFloat16);  // dL/dy in y's dtype
  const float* gp = g.data_ptr<float>();
  const uint8_t* kp = reinterpret_cast<const uint8_t*>(keep.data_ptr<bool>());
  BFloat16* yp = gy.data_ptr<BFloat16>();
  const float s = static_cast<float>(p < 1.0 ? 1.0 / (1.0 - p) : 0.0);
  parallel_for(0, g.numel(), detail::kGrain, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      const float v = rounded_to_bf16(gp[i]) * s;  // the add's gradient for y, in y's dtype
      detail::store_element(yp[i], kp[i] != 0 ? v : 0.0f);  // dropout_backward's product
    }
  });
  return gy;
}

Tensor dropout_backward(const Tensor& grad_output, const Tensor& mask, double p) {
  LS_DISPATCH_CUDA(grad_output, dropout_backward(grad_output, mask, p));
  LS_CHECK(grad_output.defined(), "dropout_backward: grad_output is undefined");
  check_p(p, "dropout_backward");
  return apply_mask(grad_output, mask, p, "dropout_backward");
}

}  // namespace lockstep::native
