// core/native/linalg.cpp — mm, bmm and matmul on top of gemm.
//
// All three reduce to one routine, `multiply`: view each operand as a batch of
// matrices, broadcast the batch dims, and hand every product to gemm_batched
// (bfloat16: the whole batch to gemm_bf16_strided_batched as one call).
// torch.matmul's rules (https://pytorch.org/docs/stable/generated/torch.matmul.html):
//   (k)        x (k)        -> ()              dot product
//   (n, k)     x (k)        -> (n)             matrix-vector
//   (k)        x (k, m)     -> (m)             vector-matrix (a is one row)
//   (..., n, k) x (..., k, m) -> (..., n, m)   batch dims broadcast, e.g.
//   (2, 1, 3, 4) x (5, 4, 6) -> (2, 5, 3, 6)
// mm is the 2-d case and bmm the 3-d case with equal batch sizes.
//
// § Note [Strided operands in gemm]
// gemm reads a row-major matrix with a leading dimension, or the transpose of
// one. So a matrix whose column stride is 1 is passed as is (ld = row stride),
// and one whose row stride is 1 — a transposed view, like w.t() — is passed
// with trans = true (ld = column stride): neither is copied. Only a matrix with
// neither stride 1 (or with overlapping rows, as after expand) is made
// contiguous first. Batch dims may have any strides, including 0 for
// broadcasting, because each product gets its own offset.
//
// The operand checks, result shape and operand layouts are shared with the CUDA
// kernels: core/native/matmul_rules.h.
//
// Read before: core/native/gemm.h, core/shape.h, core/native/matmul_rules.h.
// Read next: autograd/functions/ (matmul's backward).
#include <algorithm>

#include "core/native/cuda_dispatch.h"
#include "core/native/gemm.h"
#include "core/native/gemm_bf16.h"
#include "core/native/matmul_rules.h"
#include "core/native/native.h"
#include "core/shape.h"

namespace lockstep::native {

namespace {

using rules::as_matrices;
using rules::MatrixOperand;

// The CPU kernels take CPU tensors only (a CUDA one was dispatched before).
void check_operands(const char* op, const Tensor& a, const Tensor& b) {
  rules::check_matmul_operands(op, a, b, [&] {
    LS_CHECK(a.device().is_cpu() && b.device().is_cpu(), op, ": expected CPU tensors but got ",
             a.device().str(), " and ", b.device().str(),
             "; move them with .to(ls::Device::cpu())");
  });
}

// out (batch..., n, m) = a (batch_a..., n, k) x b (batch_b..., k, m), as one gemm
// per batch index; a and b have been through as_matrices.
// float32 / float64, and bfloat16 (products accumulated in float32, core/native/gemm_bf16.h).
template <class F>
void dispatch_matmul(ScalarType dtype, const char* op, F&& fn) {
  if (dtype == kBFloat16) return fn.template operator()<BFloat16>();
  dispatch_floating(dtype, op, fn);
}

// Note [bf16 batched matmul as one call] (gemm_bf16.h): whether oneDNN's AMX kernel
// reads `op` in place — a batch of dense matrices (row-major or transposed, no gap
// between rows), the batch dims contiguous over them except broadcast ones; or,
// row-major, the heads of a (..., T, H * cols) tensor viewed as (..., H, T, cols)
// (oneDNN's `acbd`: the context's gradient in attention's backward).
bool dense_batch(const MatrixOperand& op) {
  const IntList& sizes = op.batch_sizes;
  const IntList& strides = op.batch_strides;
  int64_t expected = op.rows * op.cols;
  size_t d = sizes.size();
  if (op.layout.ld != (op.layout.trans ? op.rows : op.cols)) {
    // heads: the last batch dim steps one matrix width, a row all H of them
    if (op.layout.trans || d == 0 || sizes[d - 1] == 1 || strides[d - 1] != op.cols ||
        op.layout.ld != sizes[d - 1] * op.cols) {
      return false;
    }
    expected *= sizes[--d];
  }
  while (d-- > 0) {
    if (sizes[d] == 1 || strides[d] == 0) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

// A dense copy of op's tensor in the orientation it is stored in: a transposed
// view (k^T of attention's keys) is copied as the keys, row by row, and read
// transposed again, instead of being gathered column by column.
Tensor dense_copy(const MatrixOperand& op) {
  const Tensor& t = op.tensor;
  if (!op.layout.trans || t.dim() < 2) return contiguous(t);
  return transpose(contiguous(transpose(t, -2, -1)), -2, -1);
}

// The bfloat16 products (float32 accumulation, gemm_bf16.h) as one call over the
// batch; an operand oneDNN's AMX kernel cannot read in place is first copied into
// a dense batch (one pass, cheaper than the slower kernel: Note [bf16 batched
// matmul as one call]). Where the products run one by one (no oneDNN bf16
// kernels: Note [bf16 GEMM in AVX2 registers]) every operand is read in place.
void multiply_into_bf16(MatrixOperand a, MatrixOperand b, const IntList& batch,
                        const Tensor& out) {
  const int64_t n = a.rows, k = a.cols, m = b.cols;
  if (batch.empty()) {  // one product: gemm_bf16's own primitive cache
    gemm_bf16<BFloat16>(a.layout.trans, b.layout.trans, n, m, k, a.tensor.data_ptr<BFloat16>(),
                        a.layout.ld, b.tensor.data_ptr<BFloat16>(), b.layout.ld, 0.0f,
                        out.data_ptr<BFloat16>(), m);
    return;
  }
  if (gemm_bf16_batched_wants_dense()) {
    if (!dense_batch(a)) a = as_matrices(dense_copy(a), /*vector_as_row=*/true);
    if (!dense_batch(b)) b = as_matrices(dense_copy(b), /*vector_as_row=*/false);
  }
  const Bf16Batch products{batch, broadcast_strides(a.batch_sizes, a.batch_strides, batch),
                           broadcast_strides(b.batch_sizes, b.batch_strides, batch)};
  gemm_bf16_strided_batched<BFloat16>(products, a.layout.trans, b.layout.trans, n, m, k,
                                      a.tensor.data_ptr<BFloat16>(), a.layout.ld,
                                      b.tensor.data_ptr<BFloat16>(), b.layout.ld,
                                      out.data_ptr<BFloat16>());
}

template <class T>
void multiply_into(const MatrixOperand& a, const MatrixOperand& b, const IntList& batch,
                   const Tensor& out) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return multiply_into_bf16(a, b, batch, out);
  } else {
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
    gemm_batched<T>(static_cast<int64_t>(c_offsets.size()), a.layout.trans, b.layout.trans, n, m,
                    k, T(1), a.tensor.data_ptr<T>(), a_offsets.data(), a.layout.ld,
                    b.tensor.data_ptr<T>(), b_offsets.data(), b.layout.ld, T(0),
                    out.data_ptr<T>(), c_offsets.data(), m);
  }
}

// matmul's rules for operands that passed check_operands; `op` names the caller.
Tensor multiply(const char* op, const Tensor& a, const Tensor& b) {
  const rules::MatmulShape shape = rules::matmul_shape(op, a, b);
  const int64_t k = shape.k;
  const IntList& batch = shape.batch;
  const IntList& out_shape = shape.out_shape;
  if (k == 0) return zeros(out_shape, a.dtype());  // an empty sum
  Tensor out = empty(out_shape, a.dtype());
  if (out.numel() == 0) return out;

  const MatrixOperand mb = as_matrices(b, /*vector_as_row=*/false);
  if (a.dim() >= 3 && b.dim() <= 2) {
    // (..., n, k) x (k, m): one (N, k) x (k, m) product with N = every row of a,
    // as torch does; `out` is laid out as (N, m). reshape copies only if a's rows
    // cannot be viewed as one matrix.
    const MatrixOperand ma = as_matrices(reshape(a, {a.numel() / k, k}), true);
    dispatch_matmul(a.dtype(), op, [&]<class T>() { multiply_into<T>(ma, mb, {}, out); });
  } else {
    const MatrixOperand ma = as_matrices(a, /*vector_as_row=*/true);
    dispatch_matmul(a.dtype(), op, [&]<class T>() { multiply_into<T>(ma, mb, batch, out); });
  }
  return out;
}

}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  LS_DISPATCH_CUDA(a, mm(a, b));
  check_operands("mm", a, b);
  rules::check_mm_ranks(a, b);
  return multiply("mm", a, b);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  LS_DISPATCH_CUDA(a, bmm(a, b));
  check_operands("bmm", a, b);
  rules::check_bmm_ranks(a, b);
  return multiply("bmm", a, b);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  LS_DISPATCH_CUDA(a, matmul(a, b));
  check_operands("matmul", a, b);
  return multiply("matmul", a, b);
}

}  // namespace lockstep::native
