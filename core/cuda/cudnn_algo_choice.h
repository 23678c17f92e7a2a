// core/cuda/cudnn_algo_choice.h — which of cuDNN's ranked candidates a
// convolution pass on the GPU runs: the CUDA side of Note [Kernel dispatch]
// (core/native/dispatch_verbose.h). conv_cudnn.cpp asks cuDNN's heuristics for
// the candidates of each pass once per geometry (Note [cuDNN convolution
// plans]) and calls choose_cudnn_algo on them; with LOCKSTEP_VERBOSE=dispatch
// the choice prints one line, as the CPU's choices do:
//   lockstep_verbose,dispatch,conv2d.forward,cudnn_algo_1,float32,x (8, 64, 56, 56) w (64, 64, 3, 3) ...
// ("_tensor_op" is appended when the candidate runs on the tensor cores). The
// rule reads only the candidate list, so it is tested without a GPU
// (tests/core/test_dispatch_verbose.cpp).
// Read before: core/native/dispatch_verbose.h, core/cuda/conv_cudnn.cpp.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "core/native/dispatch_verbose.h"

namespace lockstep::cuda_native {

constexpr size_t kMaxCudnnWorkspace = size_t(1) << 30;  // 1 GiB per convolution pass

// The math mode a float32 / float64 / bfloat16 pass may use: float32 without
// TF32 (LOCKSTEP_CUDA_TF32 unset) excludes the tensor-core modes.
inline bool cudnn_math_allowed(cudnnDataType_t type, cudnnMathType_t math, bool tf32) {
  if (type != CUDNN_DATA_FLOAT || tf32) return true;
  return math != CUDNN_TENSOR_OP_MATH && math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

// The index into cuDNN's ranked `perf` of the candidate to run, or -1: the
// first that succeeded, fits kMaxCudnnWorkspace and respects the precision
// rule, a deterministic one preferred (Note [cuDNN convolution plans]). With
// dispatch lines on, prints the choice for `family` ("conv2d.forward", ...)
// with `shapes` (native::conv_shapes).
template <class Perf>
int choose_cudnn_algo(const Perf* perf, int count, cudnnDataType_t type, bool tf32, std::string_view family,
                      ScalarType dtype, std::string_view shapes) {
  int chosen = -1;
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > kMaxCudnnWorkspace ||
        !cudnn_math_allowed(type, perf[i].mathType, tf32)) {
      continue;
    }
    if (perf[i].determinism == CUDNN_DETERMINISTIC) {
      chosen = i;
      break;
    }
    if (chosen < 0) chosen = i;
  }
  if (chosen >= 0 && native::dispatch_verbose()) {
    const bool tensor_op = perf[chosen].mathType == CUDNN_TENSOR_OP_MATH ||
                           perf[chosen].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    native::log_dispatch(family,
                         "cudnn_algo_" + std::to_string(static_cast<int>(perf[chosen].algo)) +
                             (tensor_op ? "_tensor_op" : ""),
                         dtype, shapes);
  }
  return chosen;
}

}  // namespace lockstep::cuda_native
