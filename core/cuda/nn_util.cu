// core/cuda/nn_util.cu — the helpers of core/cuda/nn_util.h.
// Read before: core/cuda/nn_util.h. Read next: core/cuda/gemm_cublas.cpp.
#include "core/cuda/nn_util.h"

#include <cstdlib>
#include <cstring>

#include "core/native/native.h"

namespace lockstep::cuda_native::nn_detail {

void check_on_device(const char* op, const Tensor& ref, std::initializer_list<Tensor> others) {
  LS_CHECK(ref.defined() && ref.device().is_cuda(), op, ": expected a CUDA tensor but got ",
           ref.defined() ? ref.device().str() : "an undefined tensor");
  cuda::check_device(ref.device(), op);
  for (const Tensor& t : others) {
    if (!t.defined()) continue;
    LS_CHECK(t.device() == ref.device(), op, ": expected every tensor on ", ref.device().str(),
             " but one of shape ", t.shape_str(), " is on ", t.device().str(),
             "; move it with .to(", ref.device().str(), ")");
  }
}

Tensor zeros_on(const IntList& sizes, ScalarType dtype, Device device) {
  Tensor t = native::empty(sizes, dtype, device);
  if (t.nbytes() > 0) {
    cuda::DeviceGuard guard(device);
    LS_CUDA_CHECK(cudaMemsetAsync(t.raw_data(), 0, t.nbytes(), cuda::current_stream(device.index)));
  }
  return t;
}

bool is_bf16(const Tensor& t) { return t.defined() && t.dtype() == kBFloat16; }

Tensor widened(const Tensor& t) { return is_bf16(t) ? native::to_dtype(t, kFloat32) : t; }

Tensor to_bf16(const Tensor& t) { return t.defined() ? native::to_dtype(t, kBFloat16) : t; }

bool tf32_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("LOCKSTEP_CUDA_TF32");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

namespace {

// first[0] = min over bad positions i (unsigned, so the initial all-ones is +inf).
template <class I>
__global__ void find_bad_kernel(const I* idx, int64_t n, int64_t bound, int64_t allowed,
                                unsigned long long* first) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t v = static_cast<int64_t>(idx[i]);
    if (v != allowed && (v < 0 || v >= bound)) {
      atomicMin(first, static_cast<unsigned long long>(i));
    }
  }
}

}  // namespace

int64_t first_out_of_range(const Tensor& idx, int64_t bound, int64_t allowed, int64_t* value) {
  const int64_t n = idx.numel();
  if (n == 0) return -1;
  LS_CHECK(idx.is_contiguous() && (idx.dtype() == kInt64 || idx.dtype() == kInt32),
           "first_out_of_range: expected a contiguous int64/int32 tensor");
  const Device device = idx.device();
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = cuda::current_stream(device.index);
  Tensor first = native::empty({1}, kInt64, device);  // read as unsigned long long
  auto* fp = static_cast<unsigned long long*>(first.raw_data());
  LS_CUDA_CHECK(cudaMemsetAsync(fp, 0xFF, sizeof(unsigned long long), stream));
  if (idx.dtype() == kInt64) {
    find_bad_kernel<<<blocks_for(n), kThreads, 0, stream>>>(idx.data_ptr<int64_t>(), n, bound,
                                                            allowed, fp);
  } else {
    find_bad_kernel<<<blocks_for(n), kThreads, 0, stream>>>(idx.data_ptr<int32_t>(), n, bound,
                                                            allowed, fp);
  }
  LS_CUDA_CHECK_LAUNCH();
  unsigned long long pos = 0;
  LS_CUDA_CHECK(cudaMemcpyAsync(&pos, fp, sizeof(pos), cudaMemcpyDeviceToHost, stream));
  LS_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (pos == ~0ull) return -1;
  const auto at = static_cast<int64_t>(pos);
  if (value != nullptr) {
    if (idx.dtype() == kInt64) {
      LS_CUDA_CHECK(
          cudaMemcpy(value, idx.data_ptr<int64_t>() + at, sizeof(int64_t), cudaMemcpyDeviceToHost));
    } else {
      int32_t v32 = 0;
      LS_CUDA_CHECK(
          cudaMemcpy(&v32, idx.data_ptr<int32_t>() + at, sizeof(int32_t), cudaMemcpyDeviceToHost));
      *value = v32;
    }
  }
  return at;
}

}  // namespace lockstep::cuda_native::nn_detail
