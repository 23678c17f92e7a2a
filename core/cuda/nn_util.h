// core/cuda/nn_util.h — small helpers shared by the CUDA kernels of the
// neural-network ops (core/cuda/cuda_native_nn.h): operand checks, launch
// sizes, device zeros, the TF32 switch and the one host read-back the ops allow.
//
// § Note [CUDA nn kernel conventions]
// Every kernel file follows the same steps, so a reader checks them once:
//   1. check the operands on the host (dtype, shape, every tensor on the same
//      CUDA device; check_on_device names the op and both devices);
//   2. make each input contiguous (native::contiguous dispatches to the device
//      copy) and allocate outputs with native::empty(..., device), which draws
//      from the caching allocator;
//   3. under a DeviceGuard, queue the kernels on cuda::current_stream(device)
//      and check the launch (LS_CUDA_CHECK_LAUNCH). Kernels use grid-stride
//      loops over int64 indices, so any numel works with a capped grid.
// No op synchronises the host, except where a value must reach the host to
// raise an ls::Error: an index that is out of range (the forwards of embedding
// and cross_entropy check device indices with first_out_of_range below; their
// backwards reuse the checked indices and skip the sync), and clip_grad_norm_'s
// total, which the API returns as a double.
//
// Read before: core/cuda/cuda_context.h, core/cuda/cuda_native_nn.h.
// Read next: core/cuda/gemm_cublas.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

#include "core/cuda/cuda_context.h"
#include "core/tensor.h"

namespace lockstep::cuda_native::nn_detail {

// Threads per block of the elementwise kernels.
inline constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements: enough to fill the GPU, capped
// (the loop covers the rest).
inline unsigned int blocks_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned int>(b < 1 ? 1 : (b > 65536 ? 65536 : b));
}

// Throws unless every defined tensor in `others` lives on `ref`'s CUDA device.
void check_on_device(const char* op, const Tensor& ref, std::initializer_list<Tensor> others);

// A new contiguous tensor of zeros on `device` (memset on the current stream).
Tensor zeros_on(const IntList& sizes, ScalarType dtype, Device device);

// True when LOCKSTEP_CUDA_TF32=1 (read once): float32 GEMMs and convolutions may
// then use TF32 tensor cores (Note [cuBLAS row-major GEMM] in gemm_cublas.cpp).
bool tf32_enabled();

// § Note [bf16 nn ops through float32]
// Under autocast (core/autocast.h) pooling, dropout, batch norm and add_relu see
// bfloat16 activations. Their CUDA kernels are written for float32 / float64, so
// a bf16 call runs them on a float32 copy of its bf16 operands and rounds each
// activation-shaped result once to bf16; per-channel parameters, statistics and
// their gradients stay float32. The values are those of the CPU's bf16 kernels
// (which compute in float32 and round once: Note [bfloat16 batch norm]); the
// cost is one extra cast pass per operand and result, as these ops are
// memory-bound. A kernel reading bf16 directly would remove it (not done yet).
bool is_bf16(const Tensor& t);
// t as float32 when it is bfloat16; t itself otherwise (also when undefined).
Tensor widened(const Tensor& t);
// A float32 result rounded once to bfloat16; undefined stays undefined.
Tensor to_bf16(const Tensor& t);

// The flat position of the first element of the contiguous int64/int32 device
// tensor `idx` outside [0, bound) and != `allowed` (pass a value outside the
// range, e.g. -1, for none), or -1 when every element is in range; `value`
// receives that element. Synchronises the stream (a host read-back of 16 bytes).
int64_t first_out_of_range(const Tensor& idx, int64_t bound, int64_t allowed, int64_t* value);

}  // namespace lockstep::cuda_native::nn_detail
