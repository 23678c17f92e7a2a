// core/tensor_functions.h — libtorch's free-function spellings of the Tensor
// methods: ls::relu(x), ls::log_softmax(x, 1), ls::sum(x), ls::max_pool2d(x, 2)...
//
// Each forwards to the method or op of the same name (core/tensor.h,
// core/nn_ops.h), so there is one definition of every op; nn::functional names
// the same functions (nn/functional.h brings them in with using-declarations,
// so `using namespace ls::nn::functional; relu(x)` is not ambiguous). Also libtorch's
// short dtype names (kF32) and factories sized by one integer (empty(n, device)).
// #include <lockstep.h> includes this header; lockstep's own code calls the methods.
// Read before: core/tensor.h, core/nn_ops.h. Read next: nn/functional.h.
#pragma once

#include <concepts>

#include "core/factory.h"
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

// ---- libtorch's short dtype names (core/dtype.h has kFloat32, kFloat, kLong, ...) ----
inline constexpr ScalarType kF16 = kFloat16;
inline constexpr ScalarType kF32 = kFloat32;
inline constexpr ScalarType kF64 = kFloat64;
inline constexpr ScalarType kBF16 = kBFloat16;
inline constexpr ScalarType kI32 = kInt32;
inline constexpr ScalarType kI64 = kInt64;
inline constexpr ScalarType kU8 = kUInt8;

// ---- one integer as the sizes of a 1-d tensor ----
// libtorch's sizes are an IntArrayRef, which one integer converts to, so
// torch::empty(n, device) makes n elements. A template, so that a braced list
// (zeros({}), zeros({2})) still means the sizes themselves.
template <class I>
concept SizeInteger = std::integral<I> && !std::same_as<I, bool>;

template <SizeInteger I>
Tensor empty(I n, const TensorOptions& options = {}) { return empty(IntList{static_cast<int64_t>(n)}, options); }
template <SizeInteger I>
Tensor zeros(I n, const TensorOptions& options = {}) { return zeros(IntList{static_cast<int64_t>(n)}, options); }
template <SizeInteger I>
Tensor ones(I n, const TensorOptions& options = {}) { return ones(IntList{static_cast<int64_t>(n)}, options); }
template <SizeInteger I>
Tensor full(I n, double value, const TensorOptions& options = {}) {
  return full(IntList{static_cast<int64_t>(n)}, value, options);
}
template <SizeInteger I>
Tensor randn(I n, const TensorOptions& options = {}) { return randn(IntList{static_cast<int64_t>(n)}, options); }
template <SizeInteger I>
Tensor rand(I n, const TensorOptions& options = {}) { return rand(IntList{static_cast<int64_t>(n)}, options); }

}  // namespace lockstep
