// core/cuda/cuda_native.h — the CUDA kernels of the basic ops: same names and
// signatures as their CPU kernels in core/native/native.h (Note [CUDA dispatch]
// in core/native/cuda_dispatch.h explains how a call gets here).
//
// Each function checks that its tensors share one CUDA device (throwing an
// ls::Error naming the op and the devices), makes that device current for the
// call, and queues its kernels on cuda::current_stream(device) without
// synchronising the host. The exceptions, which must hand a value to the host:
// allclose and equal (they return a bool) and copy_ into CPU memory.
// Dtype and shape rules are the CPU kernels' (the CPU files document them).
//   memory.cu       empty, zeros, fill_, copy_ (also CPU <-> CUDA), contiguous, clone, to_dtype
//   index.cu        index_select, index_add_, cat
//   elementwise.cu  binary ops, scalar ops, comparisons, where, allclose, equal
//   unary.cu        unary math, pow, relu/gelu backward
//   reduce.cu       sum, mean, max/min (+ indices), argmax/argmin, sum_to
//   softmax.cu      softmax, log_softmax and their backward
// Views need no kernel: they only change sizes/strides/offset (core/native/views.cpp).
// Read before: core/native/native.h, core/cuda/cuda_loops.cuh.
// Read next: core/cuda/memory.cu, core/cuda/cuda_native_nn.h.
#pragma once

#include <tuple>
#include <vector>

#include "core/native/native.h"

namespace lockstep::cuda_native {

using native::BinaryOp;
using native::CompareOp;
using native::UnaryOp;

// ---- memory (memory.cu) ----
Tensor empty(const IntList& sizes, ScalarType dtype, Device device);
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
void fill_(const Tensor& self, double value);
// dst and src may be on different devices (CPU <-> CUDA, CUDA <-> CUDA); a copy
// into CPU memory waits for the stream, since the host reads the result next.
void copy_(const Tensor& dst, const Tensor& src);
Tensor contiguous(const Tensor& t);
Tensor clone(const Tensor& t);
Tensor to_dtype(const Tensor& t, ScalarType dtype);
// A copy of t (any device) on `device`, contiguous, same dtype; t itself if already there.
Tensor to_device(const Tensor& t, Device device);

// ---- indexing and joining (index.cu) ----
Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index);
void index_add_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);

// ---- elementwise (elementwise.cu) ----
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
void binary_(BinaryOp op, const Tensor& self, const Tensor& other);
Tensor binary_scalar(BinaryOp op, const Tensor& a, double s);
Tensor scalar_binary(BinaryOp op, double s, const Tensor& a);
void binary_scalar_(BinaryOp op, const Tensor& self, double s);
Tensor add(const Tensor& a, const Tensor& b, double alpha);
Tensor compare(CompareOp op, const Tensor& a, const Tensor& b);
Tensor compare_scalar(CompareOp op, const Tensor& a, double s);
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol);
bool equal(const Tensor& a, const Tensor& b);

// ---- unary (unary.cu) ----
Tensor unary(UnaryOp op, const Tensor& a);
Tensor pow_scalar(const Tensor& a, double exponent);
Tensor relu_backward(const Tensor& grad, const Tensor& input);
Tensor gelu_backward(const Tensor& grad, const Tensor& input);

// ---- reductions (reduce.cu) ----
Tensor sum(const Tensor& t, const IntList& dims, bool keepdim);
Tensor mean(const Tensor& t, const IntList& dims, bool keepdim);
Tensor max_all(const Tensor& t);
Tensor min_all(const Tensor& t);
std::tuple<Tensor, Tensor> max_dim(const Tensor& t, int64_t dim, bool keepdim);
std::tuple<Tensor, Tensor> min_dim(const Tensor& t, int64_t dim, bool keepdim);
Tensor argmax(const Tensor& t, int64_t dim, bool keepdim);
Tensor argmin(const Tensor& t, int64_t dim, bool keepdim);
Tensor sum_to(const Tensor& grad, const IntList& shape);

// ---- softmax (softmax.cu) ----
Tensor softmax(const Tensor& t, int64_t dim);
Tensor log_softmax(const Tensor& t, int64_t dim);
Tensor softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim);
Tensor log_softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim);

}  // namespace lockstep::cuda_native

#include "core/cuda/cuda_native_nn.h"
