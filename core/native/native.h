// core/native/native.h — the CPU kernels behind every op, with no autograd.
//
// These are pure functions of tensors (see Note [Where ops live] in
// core/tensor.h). Each checks its inputs and throws ls::Error naming the op,
// shapes and dtypes on misuse. Results are new contiguous tensors unless the
// function is a view (shares storage) or ends in `_` (writes in place), or an
// elementwise op or to_dtype on a channels-last operand, whose result is
// channels-last too (Note [Channels-last activations] in memory_format.h).
// Each family lives in its own file beside this header:
//   memory.cpp      empty, copy_, fill_, contiguous, clone, to_dtype, to_device
//   views.cpp       view, reshape, transpose, permute, (un)squeeze, narrow, select, expand
//   index.cpp       index_select, index_add_, cat
//   elementwise.cpp binary ops with broadcasting, scalar ops, comparisons, where
//   unary.cpp       unary math and the backward helpers of relu/gelu
//   reduce.cpp      sum, mean, max/min (with indices), argmax/argmin, sum_to
//   softmax.cpp     softmax, log_softmax and their backward
//   linalg.cpp      mm, bmm, matmul (on top of core/native/gemm.h)
// Read before: core/shape.h. Read next: core/native/gemm.h, autograd/node.h.
#pragma once

#include <tuple>
#include <vector>

#include "core/tensor.h"

namespace lockstep::native {

// ---- memory (memory.cpp) ----
Tensor empty(const IntList& sizes, ScalarType dtype = kFloat32, Device device = Device::cpu());
Tensor empty_like(const Tensor& t);  // same shape/dtype/device, contiguous
Tensor zeros(const IntList& sizes, ScalarType dtype = kFloat32, Device device = Device::cpu());
Tensor zeros_like(const Tensor& t);
void fill_(const Tensor& self, double value);
void copy_(const Tensor& dst, const Tensor& src);  // src broadcasts to dst; dtype converts
Tensor contiguous(const Tensor& t);                // t itself if already contiguous
Tensor clone(const Tensor& t);                     // always a new contiguous copy
Tensor to_dtype(const Tensor& t, ScalarType dtype);  // t itself if dtype matches
// A contiguous copy on `device` (CPU <-> CUDA through core/cuda/memory.cu); t itself
// if it is there already. Throws in a CPU-only build when `device` is CUDA.
Tensor to_device(const Tensor& t, Device device);

// ---- views: share storage (views.cpp) ----
Tensor as_strided(const Tensor& t, const IntList& sizes, const IntList& strides, int64_t offset);
IntList infer_size(const IntList& sizes, int64_t numel, const char* op);  // resolves one -1
Tensor view(const Tensor& t, const IntList& sizes);     // throws if strides don't allow it
Tensor reshape(const Tensor& t, const IntList& sizes);  // a view if possible, else a copy
Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1);
Tensor permute(const Tensor& t, const IntList& dims);
Tensor unsqueeze(const Tensor& t, int64_t dim);
Tensor squeeze(const Tensor& t, int64_t dim);
Tensor squeeze(const Tensor& t);
Tensor flatten(const Tensor& t, int64_t start_dim, int64_t end_dim);
Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor& t, int64_t dim, int64_t index);
Tensor expand(const Tensor& t, const IntList& sizes);

// ---- indexing and joining (index.cpp) ----
Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index);  // index: 1-d int64/int32
// self[..., index[i], ...] += src[..., i, ...] along dim (the backward of index_select).
void index_add_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);

// ---- elementwise with broadcasting (elementwise.cpp) ----
enum class BinaryOp { Add, Sub, Mul, Div, Maximum, Minimum };
enum class CompareOp { Eq, Ne, Lt, Le, Gt, Ge };
const char* binary_op_name(BinaryOp op);
// a (op) b; the result has the broadcast shape and the promoted dtype.
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
// self = self (op) other, other broadcast to self's shape; self's dtype is kept.
void binary_(BinaryOp op, const Tensor& self, const Tensor& other);
// a (op) s and s (op) a. Integer tensors stay integer when s is a whole number.
Tensor binary_scalar(BinaryOp op, const Tensor& a, double s);
Tensor scalar_binary(BinaryOp op, double s, const Tensor& a);
void binary_scalar_(BinaryOp op, const Tensor& self, double s);
Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a + alpha * b
Tensor compare(CompareOp op, const Tensor& a, const Tensor& b);    // bool result
Tensor compare_scalar(CompareOp op, const Tensor& a, double s);
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol);
bool equal(const Tensor& a, const Tensor& b);

// ---- unary math (unary.cpp); float32/float64 except neg/abs/relu ----
enum class UnaryOp { Neg, Abs, Relu, Gelu, Exp, Log, Tanh, Sigmoid, Sqrt, Rsqrt, Sign, Erf, Sin, Cos };
const char* unary_op_name(UnaryOp op);
Tensor unary(UnaryOp op, const Tensor& a);
Tensor pow_scalar(const Tensor& a, double exponent);
Tensor relu_backward(const Tensor& grad, const Tensor& input);  // grad where input > 0, else 0
Tensor gelu_backward(const Tensor& grad, const Tensor& input);  // grad * d gelu(x)/dx

// ---- reductions (reduce.cpp); `dims` empty means every dim ----
Tensor sum(const Tensor& t, const IntList& dims, bool keepdim);   // ints sum in int64
// (m, n) float32 or bfloat16 -> (n) float32: sum(to_dtype(t, kFloat32), {0}), bit for bit,
// without the float32 copy (a bias gradient under autocast).
Tensor sum_rows_to_float(const Tensor& t);
Tensor mean(const Tensor& t, const IntList& dims, bool keepdim);  // floating only
Tensor max_all(const Tensor& t);
Tensor min_all(const Tensor& t);
std::tuple<Tensor, Tensor> max_dim(const Tensor& t, int64_t dim, bool keepdim);  // values, int64 indices
std::tuple<Tensor, Tensor> min_dim(const Tensor& t, int64_t dim, bool keepdim);
Tensor argmax(const Tensor& t, int64_t dim, bool keepdim);
Tensor argmin(const Tensor& t, int64_t dim, bool keepdim);
// Sums `grad` down to `shape` (which it was broadcast from): the backward of broadcasting.
Tensor sum_to(const Tensor& grad, const IntList& shape);

// ---- softmax (softmax.cpp) ----
Tensor softmax(const Tensor& t, int64_t dim);
Tensor log_softmax(const Tensor& t, int64_t dim);
Tensor softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim);
Tensor log_softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim);

// ---- linear algebra (linalg.cpp) ----
Tensor mm(const Tensor& a, const Tensor& b);      // (n, k) x (k, m) -> (n, m)
Tensor bmm(const Tensor& a, const Tensor& b);     // (B, n, k) x (B, k, m) -> (B, n, m)
Tensor matmul(const Tensor& a, const Tensor& b);  // torch.matmul rules, broadcast batch dims

}  // namespace lockstep::native
