// core/native/cuda_kernels.h — the table through which a CPU kernel reaches its CUDA kernel:
// one function pointer per op that LS_DISPATCH_CUDA forwards (Note [CUDA dispatch] in
// cuda_dispatch.h), filled by the CUDA library when it loads (Note [CUDA hooks] in
// core/cuda_hooks.h; the registrar is core/cuda/cuda_kernels_registrar.cpp).
// Each slot has the type of the CPU kernel of the same name, whose declaration both backends
// share (Note [Kernel API declared once]); so the list below is the only thing written per op.
// Read before: core/cuda_hooks.h, core/native/kernel_api.h.
// Read next: core/native/cuda_dispatch.h.
#pragma once

#include "core/cuda_hooks.h"
#include "core/native/native.h"
#include "core/native/optim_step.h"

// X(name) for every op a CPU kernel forwards to CUDA. Adding a dispatch: add its name here.
#define LS_CUDA_KERNELS(X)                                                                      \
  X(zeros_like) X(fill_) X(copy_) X(contiguous) X(clone) X(to_dtype)                            \
  X(index_select) X(index_add_) X(cat)                                                          \
  X(binary) X(binary_) X(binary_scalar) X(scalar_binary) X(binary_scalar_) X(add) X(compare)    \
  X(compare_scalar) X(where) X(allclose) X(equal)                                               \
  X(unary) X(pow_scalar) X(relu_backward) X(gelu_backward)                                      \
  X(sum) X(mean) X(max_all) X(min_all) X(max_dim) X(min_dim) X(argmax) X(argmin) X(sum_to)      \
  X(softmax) X(log_softmax) X(softmax_backward) X(log_softmax_backward)                         \
  X(mm) X(bmm) X(matmul) X(linear_forward) X(linear_backward)                                   \
  X(conv2d_forward) X(conv2d_backward) X(max_pool2d_forward) X(max_pool2d_backward)             \
  X(adaptive_avg_pool2d_forward) X(adaptive_avg_pool2d_backward)                                \
  X(batch_norm_forward) X(batch_norm_relu_forward) X(batch_norm_backward)                       \
  X(batch_norm_relu_backward) X(add_relu) X(layer_norm_forward) X(layer_norm_backward)          \
  X(dropout_forward) X(dropout_backward) X(embedding_forward) X(embedding_backward)             \
  X(cross_entropy_forward) X(cross_entropy_backward) X(mse_loss_forward) X(mse_loss_backward)   \
  X(adam_step_) X(grad_norm_part)

namespace lockstep::native {

struct CudaKernels {
#define LS_CUDA_KERNEL_SLOT(name) decltype(&::lockstep::native::name) name = nullptr;
  LS_CUDA_KERNELS(LS_CUDA_KERNEL_SLOT)
#undef LS_CUDA_KERNEL_SLOT
  // The one op whose CUDA form differs: no bf16 copy p16 (core/cuda/cuda_native_nn.h).
  void (*sgd_step_)(const Tensor& p, const Tensor& g, const Tensor& buf, double lr, double momentum,
                    double dampening, double weight_decay, bool nesterov, bool first) = nullptr;
};

// The registered table; throws naming `call` in a program linked without lockstep::cuda.
inline const CudaKernels& cuda_kernels(const char* call) {
  const CudaKernels* kernels = lockstep::detail::cuda_hooks_or_null<CudaKernels>();
  if (kernels == nullptr) throw Error(lockstep::detail::cuda_library_missing(std::string(call) + " on a CUDA tensor"));
  return *kernels;
}

}  // namespace lockstep::native
