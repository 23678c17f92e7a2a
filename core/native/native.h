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
// The ops that have a CUDA kernel too are declared once for both, in
// core/native/kernel_api.h (included below; Note [Kernel API declared once]).
// Read before: core/shape.h. Read next: core/native/kernel_api.h, core/native/gemm.h.
#pragma once

#include <tuple>
#include <vector>

#include "core/tensor.h"

namespace lockstep::native {

// ---- CPU only ----
Tensor zeros(const IntList& sizes, ScalarType dtype = kFloat32, Device device = Device::cpu());

// ---- views: share storage (views.cpp); no kernel on any device ----
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

// ---- the ops' enums (elementwise.cpp, unary.cpp) ----
enum class BinaryOp { Add, Sub, Mul, Div, Maximum, Minimum };
enum class CompareOp { Eq, Ne, Lt, Le, Gt, Ge };
enum class UnaryOp { Neg, Abs, Relu, Gelu, Exp, Log, Tanh, Sigmoid, Sqrt, Rsqrt, Sign, Erf, Sin, Cos };
const char* binary_op_name(BinaryOp op);
const char* unary_op_name(UnaryOp op);

// (m, n) float32 or bfloat16 -> (n) float32: sum(to_dtype(t, kFloat32), {0}), bit for bit,
// without the float32 copy (a bias gradient under autocast). CPU only.
Tensor sum_rows_to_float(const Tensor& t);

// ---- the kernels both backends implement (Note [Kernel API declared once]) ----
#include "core/native/kernel_api.h"

}  // namespace lockstep::native
