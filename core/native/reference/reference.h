// core/native/reference/reference.h — the definitions of the network kernels,
// as plain loops: single-threaded, no blocking, no SIMD, no library, one
// screen each.
//
// § Note [Plain reference kernels]
// Every fast path of conv2d, matmul, batch norm, layer norm, pooling, softmax
// and cross-entropy (oneDNN, Winograd, 1x1-as-GEMM, the bf16 kernels, the
// channels-last loops, threads) is tested against these functions
// (tests/core/test_reference_*.cpp). They read any floating dtype, compute in
// double and return float64 tensors, so one oracle serves float32, float64 and
// bfloat16 alike; a test hands them the values the fast path saw (a bf16 input
// is passed as the same bf16 tensor) and states its tolerance. They are as
// slow as they look: tests use small shapes. The production entry points
// (core/native/nn_kernels.h) keep their own argument checks; these assume
// checked arguments (shapes as documented below).
// Read before: core/native/nn_kernels.h, core/native/conv_geometry.h.
// Read next: core/native/reference/conv2d.cpp, tests/core/test_reference_conv.cpp.
#pragma once

#include <cstdint>
#include <tuple>

#include "core/native/conv_geometry.h"
#include "core/tensor.h"

namespace lockstep::native::reference {

// ---- convolution (conv2d.cpp) ----
// y (N, C_out, oH, oW) from x (N, C_in, H, W), w (C_out, C_in / groups, kH, kW),
// b (C_out) or undefined.
Tensor conv2d_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b);
// dL/dx (N, C_in, H, W) from gy (N, C_out, oH, oW).
Tensor conv2d_backward_data(const ConvGeometry& g, const Tensor& gy, const Tensor& w);
// (dL/dw (C_out, C_in / groups, kH, kW), dL/db (C_out)) from gy and x.
std::tuple<Tensor, Tensor> conv2d_backward_weights(const ConvGeometry& g, const Tensor& gy,
                                                   const Tensor& x);

// ---- matmul (matmul.cpp) ----
// a (n, k) @ b (k, m) -> (n, m).
Tensor mm(const Tensor& a, const Tensor& b);

// ---- batch norm (batch_norm.cpp), training mode ----
// x (N, C, *): (y, mean (C), invstd (C)) with the biased batch variance;
// w, b (C) or undefined (1 and 0).
std::tuple<Tensor, Tensor, Tensor> batch_norm_forward(const Tensor& x, const Tensor& w,
                                                      const Tensor& b, double eps);
// (dL/dx, dL/dw (C), dL/db (C)) through the batch statistics.
std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(const Tensor& gy, const Tensor& x,
                                                       const Tensor& w, double eps);

// ---- layer norm (layer_norm.cpp) ----
// x (*, D) normalised over its last `d` elements: (y, mean (M), rstd (M)), M = numel / d;
// w, b (d) or undefined.
std::tuple<Tensor, Tensor, Tensor> layer_norm_forward(const Tensor& x, int64_t d, const Tensor& w,
                                                      const Tensor& b, double eps);
// (dL/dx, dL/dw (d), dL/db (d)).
std::tuple<Tensor, Tensor, Tensor> layer_norm_backward(const Tensor& gy, const Tensor& x, int64_t d,
                                                       const Tensor& w, double eps);

// ---- pooling (pool.cpp) ----
// x (N, C, H, W) -> (y (N, C, oH, oW), indices int64: the flat h * W + w of each
// window's maximum). Padding counts as -inf; NaN wins; the first maximum wins a tie.
std::tuple<Tensor, Tensor> max_pool2d_forward(const Tensor& x, int64_t kh, int64_t kw, int64_t sh,
                                              int64_t sw, int64_t ph, int64_t pw);
// Each gy element added at its input position: (N, C, H, W).
Tensor max_pool2d_backward(const Tensor& gy, const Tensor& indices, int64_t h, int64_t w);
// x (N, C, H, W) -> (N, C, oh, ow); window i covers [floor(i H / oh), ceil((i + 1) H / oh)).
Tensor adaptive_avg_pool2d_forward(const Tensor& x, int64_t oh, int64_t ow);
Tensor adaptive_avg_pool2d_backward(const Tensor& gy, int64_t h, int64_t w);

// ---- softmax and cross-entropy (softmax.cpp) ----
// Along `dim` (non-negative): exp(x - max) / sum exp(x - max), or its log.
Tensor softmax(const Tensor& x, int64_t dim, bool log);
// dL/dx from the softmax's output y: y * (gy - sum(gy * y)).
Tensor softmax_backward(const Tensor& gy, const Tensor& y, int64_t dim);
// Mean of -log_softmax(logits)[i, target[i]] over the rows (N, C) whose target is not
// ignore_index (0-d), and dL/dlogits for a loss gradient `grad`.
Tensor cross_entropy_forward(const Tensor& logits, const Tensor& target, int64_t ignore_index);
Tensor cross_entropy_backward(double grad, const Tensor& logits, const Tensor& target,
                              int64_t ignore_index);

}  // namespace lockstep::native::reference
