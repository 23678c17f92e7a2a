// core/native/pool_rules.h — the operand checks and window sizes of max_pool2d
// and adaptive_avg_pool2d, shared by core/native/pool.cpp and core/cuda/pool.cu
// (see Note [Shared kernel rules] in core/native/elementwise_rules.h).
// Read before: core/native/pool.cpp. Read next: core/cuda/pool.cu.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/shape.h"

namespace lockstep::native::rules {

inline std::string hw_str(int64_t h, int64_t w) { return lockstep::detail::str(h, "x", w); }

// A float32 or float64 (N, C, H, W) tensor, or bfloat16 where the caller
// takes it (bfloat16_ok). `check_more` runs once it is known to be defined
// (the CUDA kernels check the device there).
template <class MoreChecks>
void check_image(const Tensor& input, const char* op, MoreChecks&& check_more,
                 bool bfloat16_ok = false) {
  lockstep::detail::check_defined(input, op);
  check_more();
  LS_CHECK(input.dim() == 4, op, ": expected a 4-d input (N, C, H, W) but got shape ",
           input.shape_str(), "; add a batch dim with .unsqueeze(0) for a single image");
  const bool float_dtype = input.dtype() == kFloat32 || input.dtype() == kFloat64 ||
                           (bfloat16_ok && input.dtype() == kBFloat16);
  LS_CHECK(float_dtype, op, ": expected a float32", bfloat16_ok ? ", float64 or bfloat16" : " or float64",
           " input but got ", input.dtype(), "; convert with .to(ls::kFloat32)");
}

// The sizes of one max_pool2d: plane (H, W) -> (oH, oW), kernel, stride, padding.
// A plain struct, passed by value to the CUDA kernels.
struct PoolWindow {
  int64_t h, w, oh, ow, kh, kw, sh, sw, ph, pw;
};

// Checks max_pool2d's parameters against an (N, C, H, W) input (already checked
// by check_image) and returns its window; an empty stride means the kernel size.
inline PoolWindow max_pool2d_window(const Tensor& input, const IntList& kernel_size,
                                    const IntList& stride, const IntList& padding, const char* op) {
  const auto [kh, kw] = pair_param(kernel_size, op, "kernel_size");
  const auto [sh, sw] = stride.empty() ? std::pair{kh, kw} : pair_param(stride, op, "stride");
  const auto [ph, pw] = pair_param(padding, op, "padding");
  LS_CHECK(kh > 0 && kw > 0, op, ": kernel_size must be positive but got ", shape_str(kernel_size));
  LS_CHECK(sh > 0 && sw > 0, op, ": stride must be positive but got ", shape_str(stride));
  LS_CHECK(ph >= 0 && pw >= 0 && ph <= kh / 2 && pw <= kw / 2, op, ": padding ", hw_str(ph, pw),
           " must be non-negative and at most half the kernel ", hw_str(kh, kw),
           " (so every window holds a real element)");
  const int64_t h = input.size(2), w = input.size(3);
  LS_CHECK(h + 2 * ph >= kh && w + 2 * pw >= kw, op, ": input ", hw_str(h, w),
           " is too small for kernel ", hw_str(kh, kw), " with padding ",
           ph == pw ? std::to_string(ph) : hw_str(ph, pw), " (input shape ", input.shape_str(),
           "); use a larger input or a smaller kernel");
  return {h, w, (h + 2 * ph - kh) / sh + 1, (w + 2 * pw - kw) / sw + 1, kh, kw, sh, sw, ph, pw};
}

// A pooling backward's input_sizes: (N, C, H, W) with grad_output's N and C.
inline void check_pool_input_sizes(const IntList& input_sizes, const Tensor& grad_output,
                                   const char* op) {
  LS_CHECK(input_sizes.size() == 4 && input_sizes[0] == grad_output.size(0) &&
               input_sizes[1] == grad_output.size(1),
           op, ": input shape ", shape_str(input_sizes), " does not match grad_output shape ",
           grad_output.shape_str());
}

// max_pool2d's indices: int64 with grad_output's shape.
inline void check_max_pool_indices(const Tensor& indices, const Tensor& grad_output, const char* op) {
  lockstep::detail::check_defined(indices, op);
  LS_CHECK(indices.dtype() == kInt64 && indices.sizes() == grad_output.sizes(), op, ": indices (",
           indices.dtype(), " ", indices.shape_str(),
           ") must be int64 with the shape of grad_output ", grad_output.shape_str());
}

// adaptive_avg_pool2d's output (oh, ow), both positive.
inline std::pair<int64_t, int64_t> adaptive_output_size(const IntList& output_size, const char* op) {
  const auto [oh, ow] = pair_param(output_size, op, "output_size");
  LS_CHECK(oh > 0 && ow > 0, op, ": output_size must be positive but got ", shape_str(output_size));
  return {oh, ow};
}

}  // namespace lockstep::native::rules
