// core/tensor_functions.h — libtorch's free-function spellings of the Tensor
// methods: ls::relu(x), ls::log_softmax(x, 1), ls::sum(x), ls::max_pool2d(x, 2)...
//
// Each forwards to the method or op of the same name (core/tensor.h,
// core/nn_ops.h), so there is one definition of every op; nn::functional names
// the same functions (nn/functional.h brings them in with using-declarations,
// so `using namespace ls::nn::functional; relu(x)` is not ambiguous).
// #include <lockstep.h> includes this header; lockstep's own code calls the methods.
// Read before: core/tensor.h, core/nn_ops.h. Read next: nn/functional.h.
#pragma once

#include "core/nn_ops.h"
#include "core/tensor.h"

namespace lockstep {

inline Tensor relu(const Tensor& x) { return x.relu(); }
inline Tensor gelu(const Tensor& x) { return x.gelu(); }
inline Tensor sigmoid(const Tensor& x) { return x.sigmoid(); }
inline Tensor tanh(const Tensor& x) { return x.tanh(); }
inline Tensor exp(const Tensor& x) { return x.exp(); }
inline Tensor log(const Tensor& x) { return x.log(); }
inline Tensor sqrt(const Tensor& x) { return x.sqrt(); }
inline Tensor rsqrt(const Tensor& x) { return x.rsqrt(); }
inline Tensor abs(const Tensor& x) { return x.abs(); }
inline Tensor neg(const Tensor& x) { return x.neg(); }
inline Tensor sin(const Tensor& x) { return x.sin(); }
inline Tensor cos(const Tensor& x) { return x.cos(); }
inline Tensor pow(const Tensor& x, double exponent) { return x.pow(exponent); }
inline Tensor softmax(const Tensor& x, int64_t dim) { return x.softmax(dim); }
inline Tensor log_softmax(const Tensor& x, int64_t dim) { return x.log_softmax(dim); }
inline Tensor sum(const Tensor& x) { return x.sum(); }
inline Tensor sum(const Tensor& x, const IntList& dims, bool keepdim = false) { return x.sum(dims, keepdim); }
inline Tensor mean(const Tensor& x) { return x.mean(); }
inline Tensor mean(const Tensor& x, const IntList& dims, bool keepdim = false) { return x.mean(dims, keepdim); }
inline Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false) { return x.argmax(dim, keepdim); }
inline Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1) {
  return x.flatten(start_dim, end_dim);
}
inline Tensor reshape(const Tensor& x, const IntList& sizes) { return x.reshape(sizes); }
inline Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) { return x.transpose(dim0, dim1); }
inline Tensor tril(const Tensor& x, int64_t diagonal = 0) { return x.tril(diagonal); }
inline Tensor triu(const Tensor& x, int64_t diagonal = 0) { return x.triu(diagonal); }
inline Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) { return x.masked_fill(mask, value); }
inline Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) { return x.gather(dim, index); }

// max_pool2d(x, 2): libtorch's square kernel from one number; stride defaults to
// the kernel (PyTorch's default), padding to 0.
inline Tensor max_pool2d(const Tensor& x, int64_t kernel_size, int64_t stride = 0, int64_t padding = 0) {
  const int64_t s = stride == 0 ? kernel_size : stride;
  return max_pool2d(x, IntList{kernel_size, kernel_size}, IntList{s, s}, IntList{padding, padding});
}

}  // namespace lockstep
