// core/native/linear.cpp — the fully connected layer, y = x W^T + b, and its gradients.
//
// Any leading dims of x fold into rows: x (*, in) is read as the matrix X (M, in),
// M = prod(*), without a copy when x is contiguous. W is stored (out, in), as
// PyTorch stores it, so the product needs W^T; gemm's trans_b reads it transposed
// in place (no transposed copy is made). With G = dL/dY (M, out):
//   forward       Y  = X W^T + b    one gemm (trans_b); C starts as b broadcast to every
//                                   row and beta = 1, so the bias add is free
//   grad_input    dX = G W          one gemm                         (M, in)
//   grad_weight   dW = G^T X        one gemm with trans_a             (out, in)
//   grad_bias     db = sum_rows G   column sums (native::sum over dim 0)   (out)
//
// Read before: core/native/gemm.h, core/native/nn_kernels_transformer.h.
// Read next: core/native/layer_norm.cpp, autograd/functions/linear.cpp.
#include <algorithm>
#include <cstring>

#include "core/native/cuda_dispatch.h"
#include "core/native/elementwise_loop.h"
#include "core/native/gemm.h"
#include "core/native/linear_rules.h"
#include "core/native/native.h"
#include "core/native/nn_kernels_transformer.h"

namespace lockstep::native {

using rules::rows_of;
using rules::with_last;

namespace {

// Shapes and dtypes of linear's operands; every error names both shapes.
void check_linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  rules::check_linear(
      input, weight, bias, [] {}, [](ScalarType t) { return is_floating_point(t); },
      ") must have the same floating dtype; convert with .to(...) first");
}

}  // namespace

Tensor linear_forward(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  LS_DISPATCH_CUDA(input, linear_forward(input, weight, bias));
  check_linear(input, weight, bias);
  const int64_t m = rows_of(input), in = weight.size(1), out = weight.size(0);
  const Tensor x = contiguous(input);                              // (M, in)
  const Tensor w = contiguous(weight);                             // (out, in)
  Tensor y = empty(with_last(input.sizes(), out), input.dtype());  // (M, out)
  dispatch_floating(input.dtype(), "linear", [&]<class T>() {
    T* yp = y.data_ptr<T>();
    T beta = T(0);
    if (bias.defined()) {  // C = b in every row; the gemm then adds X W^T onto it
      const Tensor b = contiguous(bias);
      const T* bp = b.data_ptr<T>();
      const int64_t grain = std::max<int64_t>(1, detail::kGrain / std::max<int64_t>(out, 1));
      parallel_for(0, m, grain, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) std::memcpy(yp + i * out, bp, out * sizeof(T));
      });
      beta = T(1);
    }
    gemm<T>(/*trans_a=*/false, /*trans_b=*/true, m, out, in, T(1), x.data_ptr<T>(),
            std::max<int64_t>(1, in), w.data_ptr<T>(), std::max<int64_t>(1, in), beta, yp,
            std::max<int64_t>(1, out));
  });
  return y;
}

std::tuple<Tensor, Tensor, Tensor> linear_backward(const Tensor& grad_output, const Tensor& input,
                                                   const Tensor& weight, bool need_input,
                                                   bool need_weight, bool need_bias) {
  LS_DISPATCH_CUDA(grad_output,
                   linear_backward(grad_output, input, weight, need_input, need_weight, need_bias));
  LS_CHECK(grad_output.defined(), "linear_backward: grad_output is undefined");
  const int64_t out = grad_output.dim() > 0 ? grad_output.size(-1) : 1;
  const int64_t m = grad_output.dim() > 0 ? rows_of(grad_output) : 1;
  const ScalarType dtype = grad_output.dtype();
  const Tensor g = contiguous(grad_output);  // (M, out)
  Tensor grad_input, grad_weight, grad_bias;
  if (need_input) {
    rules::check_backward_weight(weight, grad_output, out);
    const int64_t in = weight.size(1);
    const Tensor w = contiguous(weight);                            // (out, in)
    grad_input = empty(with_last(grad_output.sizes(), in), dtype);  // (M, in)
    dispatch_floating(dtype, "linear_backward", [&]<class T>() {
      gemm<T>(false, false, m, in, out, T(1), g.data_ptr<T>(), std::max<int64_t>(1, out),
              w.data_ptr<T>(), std::max<int64_t>(1, in), T(0), grad_input.data_ptr<T>(),
              std::max<int64_t>(1, in));
    });
  }
  if (need_weight) {
    rules::check_backward_input(input, grad_output, m);
    const int64_t in = input.size(-1);
    const Tensor x = contiguous(input);     // (M, in)
    grad_weight = empty({out, in}, dtype);  // (out, in) = G^T (out, M) X (M, in)
    dispatch_floating(dtype, "linear_backward", [&]<class T>() {
      gemm<T>(/*trans_a=*/true, false, out, in, m, T(1), g.data_ptr<T>(), std::max<int64_t>(1, out),
              x.data_ptr<T>(), std::max<int64_t>(1, in), T(0), grad_weight.data_ptr<T>(),
              std::max<int64_t>(1, in));
    });
  }
  if (need_bias) grad_bias = sum(reshape(g, {m, out}), {0}, /*keepdim=*/false);  // (out)
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace lockstep::native
