// core/native/add_relu.cpp — max(a + b, 0) in one pass: the residual add and
// ReLU at the end of every ResNet block (see core/native/fused_relu.h). Large
// float32 outputs are written with streaming stores (Note [Streaming stores]
// in core/native/fast/streaming_store.h), here and in its backward.
// Read before: core/native/fused_relu.h, core/native/elementwise_loop.h.
// Read next: autograd/functions/add_relu.cpp.
#include <algorithm>

#include "core/native/cuda_dispatch.h"
#include "core/native/elementwise_loop.h"
#include "core/native/fused_relu.h"
#include "core/native/native.h"
#include "core/native/fast/streaming_store.h"
#include "core/parallel.h"

namespace lockstep::native {

namespace {
// Elements per parallel_for chunk on the streaming path (a multiple of 16 floats).
constexpr int64_t kStreamingGrain = int64_t{1} << 16;
}  // namespace

Tensor add_relu(const Tensor& a, const Tensor& b) {
  LS_DISPATCH_CUDA(a, add_relu(a, b));
  const char* op = "add_relu";
  lockstep::detail::check_defined(a, op);
  lockstep::detail::check_defined(b, op);
  LS_CHECK(a.sizes() == b.sizes() && a.dtype() == b.dtype(), op,
           ": expected two tensors of the "
           "same shape and dtype but got ",
           a.dtype(), " ", a.shape_str(), " and ", b.dtype(), " ", b.shape_str(),
           "; for broadcasting or mixed dtypes use (a + b).relu()");
  Tensor out = empty(a.sizes(), a.dtype());  // a's shape, contiguous
  if (a.dtype() == kFloat32 && a.is_contiguous() && b.is_contiguous() &&
      detail::use_streaming_stores<float>(a.numel())) {  // Note [Streaming stores]
    const float* ap = a.data_ptr<float>();
    const float* bp = b.data_ptr<float>();
    float* outp = out.data_ptr<float>();
    parallel_for(0, a.numel(), kStreamingGrain, [&](int64_t lo, int64_t hi) {
      detail::stream_add_relu_run(ap + lo, bp + lo, outp + lo, hi - lo);
      detail::stream_fence();
    });
    return out;
  }
  dispatch_floating(a.dtype(), op, [&]<class T>() {
    detail::map_elements<T, T, T>(out, {a, b}, [](T x, T y) { return std::max(x + y, T(0)); });
  });
  return out;
}

Tensor add_relu_backward(const Tensor& grad, const Tensor& output) {
  // No LS_DISPATCH_CUDA line: CUDA tensors (and every other case but the
  // streaming one) go to relu_backward, which dispatches and checks them.
  const bool streaming = grad.defined() && output.defined() && !grad.device().is_cuda() &&
                         !output.device().is_cuda() && grad.dtype() == kFloat32 &&
                         output.dtype() == kFloat32 && grad.sizes() == output.sizes() &&
                         grad.is_contiguous() && output.is_contiguous() &&
                         detail::use_streaming_stores<float>(grad.numel());
  if (!streaming) return relu_backward(grad, output);
  Tensor out = empty(grad.sizes(), kFloat32);  // grad's shape, contiguous
  const float* gp = grad.data_ptr<float>();
  const float* yp = output.data_ptr<float>();
  float* outp = out.data_ptr<float>();
  parallel_for(0, grad.numel(), kStreamingGrain, [&](int64_t lo, int64_t hi) {
    detail::stream_relu_mask_run(gp + lo, yp + lo, outp + lo, hi - lo);  // Note [Streaming stores]
    detail::stream_fence();
  });
  return out;
}

}  // namespace lockstep::native
