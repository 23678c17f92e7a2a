// core/cuda/cuda_native_nn.h — the CUDA kernels of the neural-network ops
// (GEMM, convolution, pooling, normalisation, embedding, losses, dropout,
// optimizer steps): the CPU kernels' names and signatures (Note [CUDA dispatch]),
// declared once for both backends in core/native/kernel_api.h (mm, bmm, matmul)
// and kernel_api_nn.h, included at the end here (Note [Kernel API declared once]).
// Declared here: only what the CPU has no twin of (the device GEMMs, the autocast
// kernels) and sgd_step_, whose CPU kernel also takes a bf16 copy.
//
// Where each lives (all under core/cuda/; every file follows
// Note [CUDA nn kernel conventions] in core/cuda/nn_util.h):
//   gemm_cublas.cpp   gemm_device, mm, bmm, matmul, linear_forward/_backward (cuBLAS)
//   conv_cudnn.cpp    conv2d_forward/_backward (cuDNN)
//   autocast_kernels.cu  linear/conv2d_autocast_forward/_backward (bf16, autocast)
//   pool.cu           max_pool2d, adaptive_avg_pool2d
//   batch_norm.cu     batch_norm(_relu)_forward/_backward
//   layer_norm.cu     layer_norm_forward/_backward
//   embedding.cu      embedding_forward/_backward
//   dropout.cu        dropout_forward/_backward (the CPU's counter-based masks)
//   loss.cu           cross_entropy, mse_loss
//   fused_relu.cu     add_relu
//   optim_kernels.cu  sgd_step_, adam_step_, grad_norm_part
// Read before: core/cuda/cuda_native.h. Read next: core/cuda/nn_util.h, core/cuda/gemm_cublas.cpp.
#pragma once

#include <cstdint>
#include <tuple>

#include "core/native/native.h"

namespace lockstep::cuda_native {

// ---- GEMM (gemm_cublas.cpp) ----
// native::gemm's contract (core/native/gemm.h: row-major, ld = row distance) on
// device pointers of `device`, queued on its current stream. T is float or double.
template <class T>
void gemm_device(Device device, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 T alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c,
                 int64_t ldc);
// The same on bfloat16 operands with float32 accumulation (core/native/gemm_bf16.h's
// contract, alpha = 1, no bias): C is float or BFloat16, rounded once.
template <class Out>
void gemm_bf16_device(Device device, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb, float beta,
                      Out* c, int64_t ldc);
// ---- linear and conv2d under autocast (autocast_kernels.cu, Note [Autocast on CUDA]) ----
// No CPU twin: autograd/functions/autocast_ops_cuda.cpp calls these directly.
// linear: x16 (*, in), w16 (out, in), b16 (out) or undefined, all bf16 -> y (*, out) bf16.
Tensor linear_autocast_forward(const Tensor& x16, const Tensor& w16, const Tensor& b16);
// grad_output (*, out) (converted to bf16) -> dx (*, in) in dx_dtype, dw (out, in) and
// db (out) float32.
std::tuple<Tensor, Tensor, Tensor> linear_autocast_backward(const Tensor& grad_output,
                                                            const Tensor& x16, const Tensor& w16,
                                                            ScalarType dx_dtype, bool need_input,
                                                            bool need_weight, bool need_bias);
// conv2d: x16 (N, C_in, H, W) and w16 bf16, bias32 (C_out) float32 or undefined
// -> y (N, C_out, oH, oW) bf16.
Tensor conv2d_autocast_forward(const Tensor& x16, const Tensor& w16, const Tensor& bias32,
                               const IntList& stride, const IntList& padding,
                               const IntList& dilation, int64_t groups);
// grad_output (converted to bf16) -> dx in dx_dtype, dw float32 (computed in bf16 by
// cuDNN, widened), db (C_out) float32.
std::tuple<Tensor, Tensor, Tensor> conv2d_autocast_backward(
    const Tensor& grad_output, const Tensor& x16, const Tensor& w16, const IntList& stride,
    const IntList& padding, const IntList& dilation, int64_t groups, ScalarType dx_dtype,
    bool need_input, bool need_weight, bool need_bias);

// ---- optimizer steps (optim_kernels.cu; contracts in core/native/optim_step.h) ----
// One fused launch per parameter; grad_norm_part (kernel_api_nn.h) returns its
// sum to the host (it synchronises). sgd_step_ has no bf16 copy here (the CPU's p16).
void sgd_step_(const Tensor& p, const Tensor& g, const Tensor& buf, double lr, double momentum,
               double dampening, double weight_decay, bool nesterov, bool first);

// ---- the nn kernels both backends implement (Note [Kernel API declared once]) ----
#include "core/native/kernel_api_nn.h"

}  // namespace lockstep::cuda_native
