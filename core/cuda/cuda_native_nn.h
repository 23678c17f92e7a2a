// core/cuda/cuda_native_nn.h — the CUDA kernels of the neural-network ops
// (GEMM, convolution, pooling, normalisation, embedding, losses, dropout,
// optimizer steps): same names and signatures as their CPU kernels
// (Note [CUDA dispatch]), so their contracts are documented once, beside the CPU
// declarations in core/native/native.h, nn_kernels.h, nn_kernels_transformer.h,
// fused_relu.h and optim_step.h (the optimizer steps and the gradient-norm helper,
// declared at the end here, with their math).
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

#include "core/tensor.h"

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
// mm, bmm and matmul take float32, float64 or bfloat16 (bf16 out, float32 sums).
Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor linear_forward(const Tensor& input, const Tensor& weight, const Tensor& bias);
std::tuple<Tensor, Tensor, Tensor> linear_backward(const Tensor& grad_output, const Tensor& input,
                                                   const Tensor& weight, bool need_input,
                                                   bool need_weight, bool need_bias);

// ---- convolution (conv_cudnn.cpp) ----
Tensor conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias,
                      const IntList& stride, const IntList& padding, const IntList& dilation,
                      int64_t groups);
std::tuple<Tensor, Tensor, Tensor> conv2d_backward(const Tensor& grad_output, const Tensor& input,
                                                   const Tensor& weight, const IntList& stride,
                                                   const IntList& padding, const IntList& dilation,
                                                   int64_t groups, bool need_input,
                                                   bool need_weight, bool need_bias);

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

// ---- pooling (pool.cu) ----
std::tuple<Tensor, Tensor> max_pool2d_forward(const Tensor& input, const IntList& kernel_size,
                                              const IntList& stride, const IntList& padding);
Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& indices,
                           const IntList& input_sizes);
Tensor adaptive_avg_pool2d_forward(const Tensor& input, const IntList& output_size);
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const IntList& input_sizes);

// ---- batch normalisation (batch_norm.cu) ----
std::tuple<Tensor, Tensor, Tensor> batch_norm_forward(const Tensor& input, const Tensor& weight,
                                                      const Tensor& bias,
                                                      const Tensor& running_mean,
                                                      const Tensor& running_var, bool training,
                                                      double momentum, double eps);
std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& save_mean,
    const Tensor& save_invstd, bool training, bool need_input, bool need_weight, bool need_bias);
std::tuple<Tensor, Tensor, Tensor> batch_norm_relu_forward(const Tensor& input,
                                                           const Tensor& weight, const Tensor& bias,
                                                           const Tensor& running_mean,
                                                           const Tensor& running_var, bool training,
                                                           double momentum, double eps);
std::tuple<Tensor, Tensor, Tensor> batch_norm_relu_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& save_mean,
    const Tensor& save_invstd, const Tensor& output, bool training, bool need_input,
    bool need_weight, bool need_bias);

// ---- fused ReLU (fused_relu.cu) ----
Tensor add_relu(const Tensor& a, const Tensor& b);

// ---- layer_norm (layer_norm.cu) ----
std::tuple<Tensor, Tensor, Tensor> layer_norm_forward(const Tensor& input,
                                                      const IntList& normalized_shape,
                                                      const Tensor& weight, const Tensor& bias,
                                                      double eps);
std::tuple<Tensor, Tensor, Tensor> layer_norm_backward(const Tensor& grad_output,
                                                       const Tensor& input,
                                                       const IntList& normalized_shape,
                                                       const Tensor& mean, const Tensor& rstd,
                                                       const Tensor& weight, bool need_input,
                                                       bool need_weight, bool need_bias);

// ---- embedding (embedding.cu) ----
Tensor embedding_forward(const Tensor& weight, const Tensor& indices, int64_t padding_idx);
Tensor embedding_backward(const Tensor& grad_output, const Tensor& indices, int64_t num_weights,
                          int64_t padding_idx);

// ---- dropout (dropout.cu) ----
std::tuple<Tensor, Tensor> dropout_forward(const Tensor& input, double p);
Tensor dropout_backward(const Tensor& grad_output, const Tensor& mask, double p);

// ---- losses (loss.cu) ----
std::tuple<Tensor, Tensor> cross_entropy_forward(const Tensor& logits, const Tensor& target,
                                                 int64_t ignore_index);
Tensor cross_entropy_backward(const Tensor& grad, const Tensor& log_probs, const Tensor& target,
                              int64_t ignore_index);
Tensor mse_loss_forward(const Tensor& input, const Tensor& target);
Tensor mse_loss_backward(const Tensor& grad, const Tensor& input, const Tensor& target);

// ---- optimizer steps (optim_kernels.cu; contracts in core/native/optim_step.h) ----
// One fused launch per parameter; grad_norm_part returns its sum to the host
// (it synchronises).
void sgd_step_(const Tensor& p, const Tensor& g, const Tensor& buf, double lr, double momentum,
               double dampening, double weight_decay, bool nesterov, bool first);
void adam_step_(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                const Tensor& v_max, double beta1, double beta2, double eps, double step_size,
                double bc2_sqrt, double decay, double l2);
double grad_norm_part(const Tensor& g, double norm_type);

}  // namespace lockstep::cuda_native
