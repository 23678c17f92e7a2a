// core/cuda/embedding.cu — embedding lookup on the GPU and its gradient, with the
// CPU kernels' contract (core/native/embedding.cpp).
//
//   forward   one thread per output element: out[i, j] = weight[idx[i], j]
//   backward  grad_weight starts at zero; one thread per grad_output element
//             atomicAdds it into row idx[i], skipping padding_idx (so that row
//             stays zero, as the CPU's zero-after-scatter gives). A token that
//             appears k times gets k atomic adds, whose order (and so the last
//             bits of the float sum) is not fixed, as in PyTorch's CUDA kernel
//             without deterministic mode.
// Indices may be int64 or int32, on the weight's device or on the CPU (a CPU
// index tensor is checked on the host, then copied over). The forward range-checks
// indices already on the device with one 8-byte read-back (Note [CUDA nn kernel
// conventions]): an out-of-range token id is an ls::Error naming it, never a
// silent read outside the table. The backward gets the indices the forward
// checked, so it skips that host sync (it would stall the end of every backward);
// its kernel still ignores any index outside [0, num), so it cannot write out of
// bounds if called directly with bad indices.
//
// Read before: core/native/embedding.cpp, core/cuda/nn_util.h. Read next: core/cuda/dropout.cu.
#include <vector>

#include "core/cuda/cuda_native.h"
#include "core/cuda/nn_util.h"
#include "core/native/native.h"

namespace lockstep::cuda_native {

namespace {

using nn_detail::blocks_for;
using nn_detail::kThreads;

void check_padding_idx(int64_t padding_idx, int64_t num, const char* op) {
  LS_CHECK(padding_idx >= -1 && padding_idx < num, op, ": padding_idx ", padding_idx,
           " must be -1 (none) or in [0, ", num, ") for num_embeddings ", num);
}

// indices as a contiguous int64/int32 tensor on `device`, after checking dtype and
// range (device indices only when `check_device_values`).
Tensor checked_indices(const Tensor& indices, int64_t num, Device device, const char* op,
                       bool check_device_values) {
  LS_CHECK(indices.defined(), op, ": indices is an undefined tensor");
  LS_CHECK(indices.dtype() == kInt64 || indices.dtype() == kInt32, op,
           ": indices must be int64 or int32, got ", dtype_name(indices.dtype()),
           "; convert with .to(ls::kInt64)");
  if (indices.device().is_cpu()) {
    const std::vector<int64_t> idx = indices.to_vector<int64_t>();
    for (size_t i = 0; i < idx.size(); ++i) {
      LS_CHECK(idx[i] >= 0 && idx[i] < num, op, ": index ", idx[i], " (at flat position ", i,
               " of indices ", indices.shape_str(), ") is out of range for num_embeddings ", num,
               "; indices must be in [0, ", num, ")");
    }
    return to_device(native::contiguous(indices), device);
  }
  LS_CHECK(indices.device() == device, op, ": indices are on ", indices.device().str(),
           " but the weight is on ", device.str(), "; move them with .to(", device.str(), ")");
  Tensor flat = native::contiguous(indices);
  if (!check_device_values) return flat;
  int64_t value = 0;
  const int64_t at = nn_detail::first_out_of_range(flat, num, /*allowed=*/-1, &value);
  LS_CHECK(at < 0, op, ": index ", value, " (at flat position ", at, " of indices ",
           indices.shape_str(), ") is out of range for num_embeddings ", num,
           "; indices must be in [0, ", num, ")");
  return flat;
}

template <class T, class I>
__global__ void gather_rows_kernel(const T* __restrict__ w, const I* __restrict__ idx,
                                   T* __restrict__ out, int64_t total, int64_t dim) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = w[static_cast<int64_t>(idx[i / dim]) * dim + i % dim];
  }
}

template <class T, class I>
__global__ void scatter_add_rows_kernel(const T* __restrict__ g, const I* __restrict__ idx,
                                        T* __restrict__ gw, int64_t total, int64_t dim, int64_t num,
                                        int64_t padding_idx) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = static_cast<int64_t>(idx[i / dim]);
    if (row == padding_idx || row < 0 || row >= num) continue;
    atomicAdd(gw + row * dim + i % dim, g[i]);
  }
}

// Calls fn.template operator()<I>() with I the index element type.
template <class F>
void dispatch_index(ScalarType t, F&& fn) {
  if (t == kInt64) {
    fn.template operator()<int64_t>();
  } else {
    fn.template operator()<int32_t>();
  }
}

}  // namespace

Tensor embedding_forward(const Tensor& weight, const Tensor& indices, int64_t padding_idx) {
  const char* op = "embedding";
  LS_CHECK(weight.defined() && weight.dim() == 2, op,
           ": weight must be 2-d (num_embeddings, embedding_dim), got ",
           weight.defined() ? weight.shape_str() : "(undefined)");
  nn_detail::check_on_device(op, weight, {});
  LS_CHECK(weight.dtype() == kFloat32 || weight.dtype() == kFloat64, op,
           ": weight must be float32 or float64 on CUDA, got ", dtype_name(weight.dtype()));
  const Device device = weight.device();
  const int64_t num = weight.size(0), dim = weight.size(1);
  check_padding_idx(padding_idx, num, op);
  const Tensor idx = checked_indices(indices, num, device, op, /*check_device_values=*/true);
  IntList sizes = indices.sizes();
  sizes.push_back(dim);
  Tensor out = native::empty(sizes, weight.dtype(), device);  // (*indices, dim)
  const int64_t total = out.numel();
  if (total == 0) return out;
  const Tensor w = native::contiguous(weight);
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device.index);
  dispatch_floating(weight.dtype(), op, [&]<class T>() {
    dispatch_index(idx.dtype(), [&]<class I>() {
      gather_rows_kernel<T, I><<<blocks_for(total), kThreads, 0, stream>>>(
          w.data_ptr<T>(), idx.data_ptr<I>(), out.data_ptr<T>(), total, dim);
      LS_CUDA_CHECK_LAUNCH();
    });
  });
  return out;
}

Tensor embedding_backward(const Tensor& grad_output, const Tensor& indices, int64_t num_weights,
                          int64_t padding_idx) {
  const char* op = "embedding_backward";
  LS_CHECK(grad_output.defined() && indices.defined() && grad_output.dim() == indices.dim() + 1, op,
           ": grad_output ", grad_output.defined() ? grad_output.shape_str() : "(undefined)",
           " must have shape (*indices, embedding_dim) for indices ",
           indices.defined() ? indices.shape_str() : "(undefined)");
  nn_detail::check_on_device(op, grad_output, {});
  LS_CHECK(grad_output.dtype() == kFloat32 || grad_output.dtype() == kFloat64, op,
           ": grad_output must be float32 or float64 on CUDA, got ",
           dtype_name(grad_output.dtype()));
  check_padding_idx(padding_idx, num_weights, op);
  const Device device = grad_output.device();
  const int64_t dim = grad_output.size(-1);
  const IntList lead(grad_output.sizes().begin(), grad_output.sizes().end() - 1);
  LS_CHECK(lead == indices.sizes(), op, ": grad_output ", grad_output.shape_str(),
           " must have shape (*indices, embedding_dim) for indices ", indices.shape_str());
  const Tensor idx =
      checked_indices(indices, num_weights, device, op, /*check_device_values=*/false);
  Tensor grad_weight = nn_detail::zeros_on({num_weights, dim}, grad_output.dtype(), device);
  const Tensor g = native::contiguous(grad_output);  // (n, dim)
  const int64_t total = g.numel();
  if (total == 0) return grad_weight;
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device.index);
  dispatch_floating(g.dtype(), op, [&]<class T>() {
    dispatch_index(idx.dtype(), [&]<class I>() {
      scatter_add_rows_kernel<T, I><<<blocks_for(total), kThreads, 0, stream>>>(
          g.data_ptr<T>(), idx.data_ptr<I>(), grad_weight.data_ptr<T>(), total, dim, num_weights,
          padding_idx);
      LS_CUDA_CHECK_LAUNCH();
    });
  });
  return grad_weight;
}

}  // namespace lockstep::cuda_native
