// core/native/linalg.cpp — mm, bmm and matmul on top of gemm.
//
// All three reduce to one routine, `multiply`: view each operand as a batch of
// matrices, broadcast the batch dims, and hand every product to gemm_batched.
// torch.matmul's rules (https://pytorch.org/docs/stable/generated/torch.matmul.html):
//   (k)        x (k)        -> ()              dot product
//   (n, k)     x (k)        -> (n)             matrix-vector
//   (k)        x (k, m)     -> (m)             vector-matrix (a is one row)
//   (..., n, k) x (..., k, m) -> (..., n, m)   batch dims broadcast, e.g.
//   (2, 1, 3, 4) x (5, 4, 6) -> (2, 5, 3, 6)
// mm is the 2-d case and bmm the 3-d case with equal batch sizes.
//
// Note [Strided operands in gemm]
// gemm reads a row-major matrix with a leading dimension, or the transpose of
// one. So a matrix whose column stride is 1 is passed as is (ld = row stride),
// and one whose row stride is 1 — a transposed view, like w.t() — is passed
// with trans = true (ld = column stride): neither is copied. Only a matrix with
// neither stride 1 (or with overlapping rows, as after expand) is made
// contiguous first. Batch dims may have any strides, including 0 for
// broadcasting, because each product gets its own offset.
//
// Read before: core/native/gemm.h, core/shape.h. Read next: autograd/functions/ (matmul's backward).
#include <algorithm>

#include "core/native/gemm.h"
#include "core/native/native.h"
#include "core/shape.h"

namespace lockstep::native {

namespace {

// How gemm reads one matrix (see Note [Strided operands in gemm]).
struct GemmLayout {
  bool ok = false;     // false: neither stride is 1, make the tensor contiguous
  bool trans = false;  // stored as the row-major transpose
  int64_t ld = 0;      // leading dimension
};

// The layout of a (rows, cols) matrix with strides (row_stride, col_stride).
// A dim of size 1 is never stepped along, so its stride does not matter.
GemmLayout gemm_layout(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  if ((cols == 1 || col_stride == 1) && (rows == 1 || row_stride >= cols)) {
    return {true, false, rows == 1 ? cols : row_stride};
  }
  if ((rows == 1 || row_stride == 1) && (cols == 1 || col_stride >= rows)) {
    return {true, true, cols == 1 ? rows : col_stride};
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
// matmul) or one column (b's role). Copies only when gemm cannot read the layout.
MatrixOperand as_matrices(Tensor t, bool vector_as_row) {
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

// The broadcast of two batch shapes; the error names both full operand shapes.
IntList broadcast_batch(const char* op, const Tensor& a, const Tensor& b, const IntList& batch_a,
                        const IntList& batch_b) {
  const size_t ndim = std::max(batch_a.size(), batch_b.size());
  IntList out(ndim, 1);
  for (size_t i = 0; i < ndim; ++i) {  // i counts from the right
    const int64_t sa = i < batch_a.size() ? batch_a[batch_a.size() - 1 - i] : 1;
    const int64_t sb = i < batch_b.size() ? batch_b[batch_b.size() - 1 - i] : 1;
    LS_CHECK(sa == sb || sa == 1 || sb == 1, op, ": cannot multiply ", a.shape_str(), " by ",
             b.shape_str(), ": batch dims ", shape_str(batch_a), " and ", shape_str(batch_b),
             " do not broadcast");
    out[ndim - 1 - i] = sa == 1 ? sb : sa;
  }
  return out;
}

void check_operands(const char* op, const Tensor& a, const Tensor& b) {
  LS_CHECK(a.defined() && b.defined(), op, ": called with an undefined tensor");
  LS_CHECK(a.device().is_cpu() && b.device().is_cpu(), op, ": expected CPU tensors but got ",
           a.device().str(), " and ", b.device().str(), "; move them with .to(ls::Device::cpu())");
  LS_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch: ", a.shape_str(), " is ",
           dtype_name(a.dtype()), " but ", b.shape_str(), " is ", dtype_name(b.dtype()),
           "; convert one with .to(...)");
  LS_CHECK(a.dtype() == kFloat32 || a.dtype() == kFloat64, op,
           ": expected float32 or float64 tensors but got ", dtype_name(a.dtype()),
           "; convert with .to(ls::kFloat32)");
  LS_CHECK(a.dim() >= 1 && b.dim() >= 1, op, ": cannot multiply ", a.shape_str(), " by ",
           b.shape_str(), ": both operands need at least one dim");
}

// out (batch..., n, m) = a (batch_a..., n, k) x b (batch_b..., k, m), as one gemm
// per batch index; a and b have been through as_matrices.
template <class T>
void multiply_into(const MatrixOperand& a, const MatrixOperand& b, const IntList& batch,
                   const Tensor& out) {
  const int64_t n = a.rows, k = a.cols, m = b.cols;
  // Element offsets of every product's A, B and C (batch dims broadcast with stride 0).
  const IntList strides[2] = {broadcast_strides(a.batch_sizes, a.batch_strides, batch),
                              broadcast_strides(b.batch_sizes, b.batch_strides, batch)};
  std::vector<int64_t> a_offsets, b_offsets, c_offsets;
  for_each_offset(batch, strides, [&](const int64_t* off) {
    c_offsets.push_back(static_cast<int64_t>(a_offsets.size()) * n * m);
    a_offsets.push_back(off[0]);
    b_offsets.push_back(off[1]);
  });
  gemm_batched<T>(static_cast<int64_t>(c_offsets.size()), a.layout.trans, b.layout.trans, n, m, k,
                  T(1), a.tensor.data_ptr<T>(), a_offsets.data(), a.layout.ld,
                  b.tensor.data_ptr<T>(), b_offsets.data(), b.layout.ld, T(0),
                  out.data_ptr<T>(), c_offsets.data(), m);
}

// matmul's rules for operands that passed check_operands; `op` names the caller.
Tensor multiply(const char* op, const Tensor& a, const Tensor& b) {
  const int64_t k = a.size(-1);
  const int64_t k_b = b.dim() == 1 ? b.size(0) : b.size(-2);
  LS_CHECK(k == k_b, op, ": cannot multiply ", a.shape_str(), " by ", b.shape_str(),
           ": inner dims ", k, " and ", k_b, " differ");

  // The result's shape: broadcast batch dims, then n unless a is 1-d, then m unless b is.
  const IntList batch_a(a.sizes().begin(), a.sizes().end() - std::min<int64_t>(a.dim(), 2));
  const IntList batch_b(b.sizes().begin(), b.sizes().end() - std::min<int64_t>(b.dim(), 2));
  const IntList batch = broadcast_batch(op, a, b, batch_a, batch_b);
  IntList out_shape = batch;
  if (a.dim() >= 2) out_shape.push_back(a.size(-2));
  if (b.dim() >= 2) out_shape.push_back(b.size(-1));
  if (k == 0) return zeros(out_shape, a.dtype());  // an empty sum
  Tensor out = empty(out_shape, a.dtype());
  if (out.numel() == 0) return out;

  const MatrixOperand mb = as_matrices(b, /*vector_as_row=*/false);
  if (a.dim() >= 3 && b.dim() <= 2) {
    // (..., n, k) x (k, m): one (N, k) x (k, m) product with N = every row of a,
    // as torch does; `out` is laid out as (N, m). reshape copies only if a's rows
    // cannot be viewed as one matrix.
    const MatrixOperand ma = as_matrices(reshape(a, {a.numel() / k, k}), true);
    dispatch_floating(a.dtype(), op, [&]<class T>() { multiply_into<T>(ma, mb, {}, out); });
  } else {
    const MatrixOperand ma = as_matrices(a, /*vector_as_row=*/true);
    dispatch_floating(a.dtype(), op, [&]<class T>() { multiply_into<T>(ma, mb, batch, out); });
  }
  return out;
}

}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  check_operands("mm", a, b);
  LS_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected 2-d tensors but got ", a.shape_str(),
           " and ", b.shape_str(), "; use matmul for other ranks");
  return multiply("mm", a, b);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_operands("bmm", a, b);
  LS_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-d tensors (B, n, k) and (B, k, m) but got ",
           a.shape_str(), " and ", b.shape_str(), "; use matmul to broadcast batch dims");
  LS_CHECK(a.size(0) == b.size(0), "bmm: cannot multiply ", a.shape_str(), " by ", b.shape_str(),
           ": batch sizes ", a.size(0), " and ", b.size(0), " differ");
  return multiply("bmm", a, b);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_operands("matmul", a, b);
  return multiply("matmul", a, b);
}

}  // namespace lockstep::native
