// core/cuda/gemm_cublas.cpp — matrix products on the GPU with cuBLAS: gemm_device
// (native::gemm's contract on device pointers), mm, bmm and matmul.
//
// § Note [cuBLAS row-major GEMM]
// lockstep matrices are row-major; cuBLAS reads column-major. A row-major (r, c)
// matrix with leading dimension ld is, byte for byte, the column-major (c, r)
// matrix with the same ld: its transpose. So instead of C = op(A) op(B) we ask
// cuBLAS for
//     C^T (n, m) = op(B)^T (n, k) . op(A)^T (k, m)
// i.e. cublasGemmEx(op_b, op_a, n, m, k, B, ldb, A, lda, C, ldc): swap the
// operands and the sizes m and n, keep every flag and ld. Nothing is copied.
// Precision: float32 products use CUBLAS_COMPUTE_32F with the handle's math mode
// set to CUBLAS_DEFAULT_MATH on every call, so no TF32 tensor cores and results
// match the CPU reference to float32 rounding (PyTorch's default for matmul
// too). LOCKSTEP_CUDA_TF32=1 in the environment selects
// CUBLAS_COMPUTE_32F_FAST_TF32 instead (about 10 bits of mantissa in the
// products, several times the throughput on an H200). float64 uses COMPUTE_64F.
// The 64-bit-size entry points (cublasGemmEx_64) take any int64 size.
// bfloat16 products (gemm_bf16_device; matmul and bmm on bf16 tensors, linear
// under autocast) read CUDA_R_16BF operands and accumulate with
// CUBLAS_COMPUTE_32F on the tensor cores; C is CUDA_R_16BF (rounded once) or
// CUDA_R_32F, the contract of core/native/gemm_bf16.h on the CPU.
//
// matmul follows core/native/linalg.cpp (torch.matmul's rules, Note [Strided
// operands in gemm]): each operand is read in place when one stride of its
// matrices is 1, and its batch dims must reach cuBLAS as ONE stride
// (cublasGemmStridedBatchedEx): that holds for a contiguous batch and for a
// fully broadcast one (stride 0); any other batch layout (a partly broadcast
// batch) is expanded and copied first.
//
// Read before: core/native/gemm.h, core/native/linalg.cpp, core/cuda/nn_util.h.
// Read next: core/cuda/linear.cu.
#include <algorithm>
#include <optional>

#include "core/cuda/cublas_library.h"
#include "core/cuda/cuda_native_nn.h"
#include "core/cuda/nn_util.h"
#include "core/native/matmul_rules.h"
#include "core/native/native.h"
#include "core/shape.h"

// Throws ls::Error naming the cuBLAS call and its status.
#define LS_CUBLAS_CHECK(expr)                                                                      \
  do {                                                                                             \
    const cublasStatus_t ls_cublas_status_ = (expr);                                               \
    LS_CHECK(ls_cublas_status_ == CUBLAS_STATUS_SUCCESS, "cuBLAS call ", #expr,                    \
             " failed: ", cuda::cublas_library().status_string(ls_cublas_status_), " (", __FILE__, \
             ":", __LINE__,                                                                        \
             "); check the sizes and that the GPU has memory left");                               \
  } while (0)

namespace lockstep::cuda_native {

namespace {

template <class T>
constexpr cudaDataType data_type() {
  if constexpr (std::is_same_v<T, BFloat16>) return CUDA_R_16BF;
  return std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_64F;
}

// T is an operand's element type; bf16 operands accumulate in float32.
template <class T>
cublasComputeType_t compute_type() {
  if constexpr (std::is_same_v<T, double>) {
    return CUBLAS_COMPUTE_64F;
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return CUBLAS_COMPUTE_32F;
  } else {
    return nn_detail::tf32_enabled() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  }
}

// alpha and beta have the compute type's scalar type: double for COMPUTE_64F, else float.
template <class T>
using scale_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

cublasOperation_t op_of(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

// The handle for `device`, bound to its current stream, in the mode every call here assumes.
cublasHandle_t ready_handle(Device device) {
  cublasHandle_t handle = cuda::cublas_handle(device.index);
  const cuda::CublasLibrary& cublas = cuda::cublas_library();  // Note [cuBLAS loaded on first use]
  LS_CUBLAS_CHECK(cublas.set_pointer_mode(handle, CUBLAS_POINTER_MODE_HOST));
  LS_CUBLAS_CHECK(cublas.set_math_mode(handle, CUBLAS_DEFAULT_MATH));
  return handle;
}

// `batch` products, operand i at a + i * stride_a etc. (Note [cuBLAS row-major GEMM]).
template <class T>
void gemm_strided_batched(Device device, int64_t batch, bool trans_a, bool trans_b, int64_t m,
                          int64_t n, int64_t k, const T* a, int64_t lda, int64_t stride_a,
                          const T* b, int64_t ldb, int64_t stride_b, T* c, int64_t ldc,
                          int64_t stride_c) {
  if (batch == 1) {
    if constexpr (std::is_same_v<T, BFloat16>) {
      gemm_bf16_device<BFloat16>(device, trans_a, trans_b, m, n, k, a, lda, b, ldb, 0.0f, c, ldc);
    } else {
      gemm_device<T>(device, trans_a, trans_b, m, n, k, T(1), a, lda, b, ldb, T(0), c, ldc);
    }
    return;
  }
  cuda::DeviceGuard guard(device);
  cublasHandle_t handle = ready_handle(device);
  const scale_t<T> alpha = 1, beta = 0;
  LS_CUBLAS_CHECK(cuda::cublas_library().gemm_strided_batched_ex(
      handle, op_of(trans_b), op_of(trans_a), n, m, k, &alpha, b, data_type<T>(), ldb, stride_b, a,
      data_type<T>(), lda, stride_a, &beta, c, data_type<T>(), ldc, stride_c, batch,
      compute_type<T>(), CUBLAS_GEMM_DEFAULT));
}

// ---- matmul's operands: core/native/matmul_rules.h, shared with core/native/linalg.cpp ----

// § Note [Batched cuBLAS calls]
// cublasGemmStridedBatchedEx steps every operand by ONE stride per product. That
// fits bmm's contiguous batches and a fully broadcast operand (stride 0), but not
// attention's q @ k^T, whose (B, H) batch comes from a transpose: stride D over H
// but T * H * D over B. So matmul splits the broadcast batch shape at the first
// dim from which both operands' remaining strides collapse to one (split == all
// dims always does: a single product), issues one strided-batched call per index
// of the dims before it (B calls of H products for attention), and only when
// that would take more than kMaxHostLoop calls copies the operand(s) lacking a
// single stride into a contiguous, fully expanded batch instead.
constexpr int64_t kMaxHostLoop = 64;

using native::rules::as_matrices;
using native::rules::gemm_layout;
using native::rules::MatrixOperand;

// The one stride that steps through `batch` (flattened, row-major) on strides
// `strides` already broadcast to it, or nothing when no single stride does.
std::optional<int64_t> single_batch_stride(const IntList& batch, const IntList& strides) {
  std::optional<int64_t> step, expected;
  for (size_t i = batch.size(); i-- > 0;) {
    if (batch[i] == 1) continue;
    if (!step) {
      step = strides[i];
    } else if (strides[i] != *expected) {
      return std::nullopt;
    }
    expected = strides[i] * batch[i];
  }
  return step.value_or(0);
}

// Makes `op` steppable with one batch stride over `batch`; returns that stride.
int64_t batch_stride_of(MatrixOperand& op, const IntList& batch) {
  const IntList strides = broadcast_strides(op.batch_sizes, op.batch_strides, batch);
  if (auto s = single_batch_stride(batch, strides)) return *s;
  IntList full = batch;  // a partly broadcast batch: materialise it
  full.push_back(op.rows);
  full.push_back(op.cols);
  Tensor t = native::contiguous(native::expand(op.tensor, full));
  op.tensor = t;
  op.layout = gemm_layout(op.rows, op.cols, op.cols, 1);
  op.batch_sizes = batch;
  op.batch_strides = IntList(t.strides().begin(), t.strides().end() - 2);
  return op.rows * op.cols;
}

// The product dtypes: float32, float64 and bfloat16 (float32 accumulation).
template <class F>
void dispatch_gemm(ScalarType t, const char* op, F&& fn) {
  if (t == kBFloat16) {
    fn.template operator()<BFloat16>();
  } else {
    dispatch_floating(t, op, std::forward<F>(fn));
  }
}

void check_operands(const char* op, const Tensor& a, const Tensor& b) {
  native::rules::check_matmul_operands(op, a, b,
                                       [&] { nn_detail::check_on_device(op, a, {b}); });
}

Tensor multiply(const char* op, const Tensor& a, const Tensor& b) {
  const native::rules::MatmulShape shape = native::rules::matmul_shape(op, a, b);
  const int64_t k = shape.k;
  IntList batch = shape.batch;
  const IntList& out_shape = shape.out_shape;
  if (k == 0) return nn_detail::zeros_on(out_shape, a.dtype(), a.device());  // an empty sum
  Tensor out = native::empty(out_shape, a.dtype(), a.device());
  if (out.numel() == 0) return out;

  MatrixOperand mb = as_matrices(b, /*vector_as_row=*/false);
  MatrixOperand ma;
  if (a.dim() >= 3 && b.dim() <= 2) {  // fold a's batch into rows: one (N, k) x (k, m) product
    ma = as_matrices(native::reshape(a, {a.numel() / k, k}), true);
    batch = {};
  } else {
    ma = as_matrices(a, /*vector_as_row=*/true);
  }
  const int64_t n = ma.rows, m = mb.cols;
  const int64_t ldc = std::max<int64_t>(1, m);
  // Note [Batched cuBLAS calls]: the longest tail of batch dims that both operands
  // step through with one stride goes to one strided-batched call; the dims before
  // it are looped on the host, or, past kMaxHostLoop calls, materialised.
  const IntList sa = broadcast_strides(ma.batch_sizes, ma.batch_strides, batch);
  const IntList sb = broadcast_strides(mb.batch_sizes, mb.batch_strides, batch);
  size_t split = 0;
  std::optional<int64_t> inner_a, inner_b;
  for (; split <= batch.size(); ++split) {  // split == batch.size() always works
    const IntList tail(batch.begin() + split, batch.end());
    inner_a = single_batch_stride(tail, IntList(sa.begin() + split, sa.end()));
    inner_b = single_batch_stride(tail, IntList(sb.begin() + split, sb.end()));
    if (inner_a && inner_b) break;
  }
  const IntList outer(batch.begin(), batch.begin() + split);
  if (numel_of(outer) > kMaxHostLoop) {  // materialise the operands that need it
    const int64_t stride_a = batch_stride_of(ma, batch), stride_b = batch_stride_of(mb, batch);
    dispatch_gemm(a.dtype(), op, [&]<class T>() {
      gemm_strided_batched<T>(a.device(), numel_of(batch), ma.layout.trans, mb.layout.trans, n, m,
                              k, ma.tensor.data_ptr<T>(), ma.layout.ld, stride_a,
                              mb.tensor.data_ptr<T>(), mb.layout.ld, stride_b, out.data_ptr<T>(),
                              ldc, n * m);
    });
    return out;
  }
  const int64_t inner_count = numel_of(IntList(batch.begin() + split, batch.end()));
  IntList sc(outer.size());  // out's (contiguous) strides over the outer dims
  for (size_t d = outer.size(); d-- > 0;) {
    sc[d] = d + 1 == outer.size() ? inner_count * n * m : sc[d + 1] * outer[d + 1];
  }
  const IntList strides[3] = {IntList(sa.begin(), sa.begin() + split),
                              IntList(sb.begin(), sb.begin() + split), sc};
  dispatch_gemm(a.dtype(), op, [&]<class T>() {
    const T* ap = ma.tensor.data_ptr<T>();
    const T* bp = mb.tensor.data_ptr<T>();
    T* cp = out.data_ptr<T>();
    for_each_offset(outer, strides, [&](const int64_t* off) {
      gemm_strided_batched<T>(a.device(), inner_count, ma.layout.trans, mb.layout.trans, n, m, k,
                              ap + off[0], ma.layout.ld, *inner_a, bp + off[1], mb.layout.ld,
                              *inner_b, cp + off[2], ldc, n * m);
    });
  });
  return out;
}

}  // namespace

template <class T>
void gemm_device(Device device, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 T alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c,
                 int64_t ldc) {
  if (m == 0 || n == 0) return;
  cuda::DeviceGuard guard(device);
  cublasHandle_t handle = ready_handle(device);
  // Note [cuBLAS row-major GEMM]: C^T = op(B)^T op(A)^T.
  LS_CUBLAS_CHECK(cuda::cublas_library().gemm_ex(
      handle, op_of(trans_b), op_of(trans_a), n, m, k, &alpha, b, data_type<T>(), ldb, a,
      data_type<T>(), lda, &beta, c, data_type<T>(), ldc, compute_type<T>(), CUBLAS_GEMM_DEFAULT));
}

template void gemm_device<float>(Device, bool, bool, int64_t, int64_t, int64_t, float, const float*,
                                 int64_t, const float*, int64_t, float, float*, int64_t);
template void gemm_device<double>(Device, bool, bool, int64_t, int64_t, int64_t, double,
                                  const double*, int64_t, const double*, int64_t, double, double*,
                                  int64_t);

template <class Out>
void gemm_bf16_device(Device device, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb, float beta,
                      Out* c, int64_t ldc) {
  static_assert(std::is_same_v<Out, float> || std::is_same_v<Out, BFloat16>,
                "gemm_bf16_device: C is float or BFloat16");
  if (m == 0 || n == 0) return;
  cuda::DeviceGuard guard(device);
  cublasHandle_t handle = ready_handle(device);
  const float alpha = 1.0f;
  // Note [cuBLAS row-major GEMM]: C^T = op(B)^T op(A)^T; bf16 operands, float32 sums.
  LS_CUBLAS_CHECK(cuda::cublas_library().gemm_ex(
      handle, op_of(trans_b), op_of(trans_a), n, m, k, &alpha, b, CUDA_R_16BF, ldb, a, CUDA_R_16BF,
      lda, &beta, c, data_type<Out>(), ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

template void gemm_bf16_device<float>(Device, bool, bool, int64_t, int64_t, int64_t,
                                      const BFloat16*, int64_t, const BFloat16*, int64_t, float,
                                      float*, int64_t);
template void gemm_bf16_device<BFloat16>(Device, bool, bool, int64_t, int64_t, int64_t,
                                         const BFloat16*, int64_t, const BFloat16*, int64_t, float,
                                         BFloat16*, int64_t);

Tensor mm(const Tensor& a, const Tensor& b) {
  check_operands("mm", a, b);
  native::rules::check_mm_ranks(a, b);
  return multiply("mm", a, b);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_operands("bmm", a, b);
  native::rules::check_bmm_ranks(a, b);
  return multiply("bmm", a, b);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_operands("matmul", a, b);
  return multiply("matmul", a, b);
}

}  // namespace lockstep::cuda_native
