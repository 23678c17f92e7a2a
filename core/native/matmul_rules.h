// core/native/matmul_rules.h — the operand checks, result shape and operand
// layouts of mm, bmm and matmul, shared by core/native/linalg.cpp (the CPU
// kernels, on gemm) and core/cuda/gemm_cublas.cpp (on cuBLAS); see
// Note [Shared kernel rules] in core/native/elementwise_rules.h and
// Note [Strided operands in gemm] in core/native/linalg.cpp.
//
// Read before: core/native/gemm.h. Read next: core/native/linalg.cpp, core/cuda/gemm_cublas.cpp.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/native/native.h"
#include "core/shape.h"

namespace lockstep::native::rules {

// How gemm reads one matrix (see Note [Strided operands in gemm]).
struct GemmLayout {
  bool ok = false;     // false: neither stride is 1, make the tensor contiguous
  bool trans = false;  // stored as the row-major transpose
  int64_t ld = 0;      // leading dimension, at least 1 (BLAS and cuBLAS require it)
};

// The layout of a (rows, cols) matrix with strides (row_stride, col_stride).
// A dim of size 1 is never stepped along, so its stride does not matter.
inline GemmLayout gemm_layout(int64_t rows, int64_t cols, int64_t row_stride,
                              int64_t col_stride) {
  if ((cols == 1 || col_stride == 1) && (rows == 1 || row_stride >= cols)) {
    return {true, false, std::max<int64_t>(1, rows == 1 ? cols : row_stride)};
  }
  if ((rows == 1 || row_stride == 1) && (cols == 1 || col_stride >= rows)) {
    return {true, true, std::max<int64_t>(1, cols == 1 ? rows : col_stride)};
  }
  return {};
}

// One operand as a batch of (rows, cols) matrices. `tensor` owns the memory and
// its first element is the first matrix's (0, 0).
struct MatrixOperand {
  Tensor tensor;
  int64_t rows = 0, cols = 0;
  GemmLayout layout;
  IntList batch_sizes, batch_strides;  // the leading dims, before broadcasting
};

// Views t as matrices: its last two dims, or for a 1-d t one row (a's role in
// matmul) or one column (b's role). Copies (on t's device) only when gemm cannot
// read the layout.
inline MatrixOperand as_matrices(Tensor t, bool vector_as_row) {
  MatrixOperand op;
  const int64_t d = t.dim();
  for (int attempt = 0; attempt < 2; ++attempt) {
    int64_t row_stride, col_stride;
    if (d == 1) {
      const int64_t len = t.size(0);
      op.rows = vector_as_row ? 1 : len;
      op.cols = vector_as_row ? len : 1;
      row_stride = vector_as_row ? len : t.stride(0);
      col_stride = vector_as_row ? t.stride(0) : 1;
    } else {
      op.rows = t.size(d - 2);
      op.cols = t.size(d - 1);
      row_stride = t.stride(d - 2);
      col_stride = t.stride(d - 1);
      op.batch_sizes.assign(t.sizes().begin(), t.sizes().end() - 2);
      op.batch_strides.assign(t.strides().begin(), t.strides().end() - 2);
    }
    op.layout = gemm_layout(op.rows, op.cols, row_stride, col_stride);
    if (op.layout.ok) break;
    t = contiguous(t);  // a contiguous matrix always has a row-major layout
  }
  op.tensor = t;
  return op;
}

// Checks the operands of mm/bmm/matmul; `check_devices` runs after the defined
// check (each device's kernel checks that both live on its device).
template <class DeviceCheck>
void check_matmul_operands(const char* op, const Tensor& a, const Tensor& b,
                           DeviceCheck&& check_devices) {
  LS_CHECK(a.defined() && b.defined(), op, ": called with an undefined tensor");
  check_devices();
  LS_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch: ", a.shape_str(), " is ",
           dtype_name(a.dtype()), " but ", b.shape_str(), " is ", dtype_name(b.dtype()),
           "; convert one with .to(...)");
  // bfloat16 products accumulate in float32: core/native/gemm_bf16.h on the CPU,
  // gemm_bf16_device (core/cuda/gemm_cublas.cpp) on a GPU.
  LS_CHECK(a.dtype() == kFloat32 || a.dtype() == kFloat64 || a.dtype() == kBFloat16, op,
           ": expected float32 or float64 tensors (or bfloat16) but got ", dtype_name(a.dtype()),
           " on ", a.device().str(), "; convert with .to(ls::kFloat32)");
  LS_CHECK(a.dim() >= 1 && b.dim() >= 1, op, ": cannot multiply ", a.shape_str(), " by ",
           b.shape_str(), ": both operands need at least one dim");
}

// mm's and bmm's rank rules, on top of check_matmul_operands.
inline void check_mm_ranks(const Tensor& a, const Tensor& b) {
  LS_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected 2-d tensors but got ", a.shape_str(),
           " and ", b.shape_str(), "; use matmul for other ranks");
}

inline void check_bmm_ranks(const Tensor& a, const Tensor& b) {
  LS_CHECK(a.dim() == 3 && b.dim() == 3,
           "bmm: expected 3-d tensors (B, n, k) and (B, k, m) but got ", a.shape_str(), " and ",
           b.shape_str(), "; use matmul to broadcast batch dims");
  LS_CHECK(a.size(0) == b.size(0), "bmm: cannot multiply ", a.shape_str(), " by ", b.shape_str(),
           ": batch sizes ", a.size(0), " and ", b.size(0), " differ");
}

// The shapes of a product: its inner size k, its broadcast batch dims, and the
// result's shape (the batch, then n unless a is 1-d, then m unless b is).
struct MatmulShape {
  int64_t k = 0;
  IntList batch;
  IntList out_shape;
};

inline MatmulShape matmul_shape(const char* op, const Tensor& a, const Tensor& b) {
  MatmulShape s;
  s.k = a.size(-1);
  const int64_t k_b = b.dim() == 1 ? b.size(0) : b.size(-2);
  LS_CHECK(s.k == k_b, op, ": cannot multiply ", a.shape_str(), " by ", b.shape_str(),
           ": inner dims ", s.k, " and ", k_b, " differ");
  const IntList batch_a(a.sizes().begin(), a.sizes().end() - std::min<int64_t>(a.dim(), 2));
  const IntList batch_b(b.sizes().begin(), b.sizes().end() - std::min<int64_t>(b.dim(), 2));
  const size_t ndim = std::max(batch_a.size(), batch_b.size());
  s.batch.assign(ndim, 1);
  for (size_t i = 0; i < ndim; ++i) {  // i counts from the right
    const int64_t sa = i < batch_a.size() ? batch_a[batch_a.size() - 1 - i] : 1;
    const int64_t sb = i < batch_b.size() ? batch_b[batch_b.size() - 1 - i] : 1;
    LS_CHECK(sa == sb || sa == 1 || sb == 1, op, ": cannot multiply ", a.shape_str(), " by ",
             b.shape_str(), ": batch dims ", shape_str(batch_a), " and ", shape_str(batch_b),
             " do not broadcast");
    s.batch[ndim - 1 - i] = sa == 1 ? sb : sa;
  }
  s.out_shape = s.batch;
  if (a.dim() >= 2) s.out_shape.push_back(a.size(-2));
  if (b.dim() >= 2) s.out_shape.push_back(b.size(-1));
  return s;
}

}  // namespace lockstep::native::rules
