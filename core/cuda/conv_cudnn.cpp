// core/cuda/conv_cudnn.cpp — 2-d convolution on the GPU with cuDNN: forward,
// backward-data, backward-filter and the bias gradient.
//
// cuDNN 9 still ships the descriptor API of cuDNN 7/8 (cudnn_cnn.h:
// cudnnConvolutionForward and friends; marked deprecated in favour of the graph
// API, but complete and supported), which maps one to one onto lockstep's
// conv2d: NCHW tensors, a (C_out, C_in / groups, kH, kW) filter, a convolution
// descriptor with padding, stride, dilation and a group count. Mode is
// CUDNN_CROSS_CORRELATION (what deep-learning "convolution" means, as the CPU).
//
// § Note [cuDNN convolution plans]
// Building descriptors and choosing algorithms costs far more than a small
// convolution, and a network runs the same few shapes every step. So a Plan —
// the five descriptors of one geometry (device, dtype, N, C, H, W, C_out, kH,
// kW, stride, padding, dilation, groups) and the algorithm chosen for each of
// the three passes — is built on first use and kept in a process-wide cache
// (mutex-guarded; entries live until exit, a network has tens of shapes).
// Algorithms come from cuDNN's heuristics (cudnnGet*Algorithm_v7, ranked by
// expected speed, nothing run): the first candidate that succeeds, fits the
// workspace cap (kMaxCudnnWorkspace, cudnn_algo_choice.h) and respects the precision rule below, preferring
// deterministic ones (backward-filter algorithm 0 and friends use atomics; a
// deterministic pick makes a rerun bit-identical). The workspace is a uint8
// tensor from the caching allocator (native::empty), freed when the call returns
// (the allocator reuses the block for the next call).
// Precision: float32 convolutions run with CUDNN_FMA_MATH (no TF32 tensor
// cores), so they match the CPU reference to float32 rounding, as PyTorch with
// allow_tf32 = False; LOCKSTEP_CUDA_TF32=1 lets cuDNN pick TF32 kernels.
// float64 is supported by cuDNN's FMA kernels, which makes gradcheck possible.
// bfloat16 (conv2d under autocast, core/cuda/autocast_kernels.cu) uses bf16
// tensor and filter descriptors with a float32 compute type (cuDNN's
// PSEUDO_BFLOAT16 configuration: float32 accumulation, each output rounded
// once) and may run on the tensor cores (CUDNN_TENSOR_OP_MATH).
//
// Read before: core/native/conv.cpp (the geometry checks, shared through
// native::make_conv_geometry), core/cuda/nn_util.h. Read next: core/cuda/pool.cu.
#include <cudnn.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/cuda/cuda_native_nn.h"
#include "core/cuda/cudnn_algo_choice.h"
#include "core/cuda/cudnn_check.h"
#include "core/cuda/nn_util.h"
#include "core/native/conv_dispatch.h"
#include "core/native/conv_geometry.h"
#include "core/native/native.h"
#include "core/shape.h"

namespace lockstep::cuda_native {

namespace {

// The geometry of one convolution, as a map key.
struct PlanKey {
  int device;
  int dtype;
  std::vector<int64_t> dims;  // n c h w c_out kh kw sh sw ph pw dh dw groups
  bool operator<(const PlanKey& o) const {
    return std::tie(device, dtype, dims) < std::tie(o.device, o.dtype, o.dims);
  }
};

// See Note [cuDNN convolution plans].
struct Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  // One convolution descriptor per pass, each set to the math mode of its
  // algorithm once chosen; after that a plan is only read, so the passes run
  // outside the cache's lock.
  cudnnConvolutionDescriptor_t conv_fwd = nullptr, conv_bwd_data = nullptr,
                               conv_bwd_filter = nullptr;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  ScalarType dtype = kFloat32;
  std::string shapes;  // for the dispatch lines (Note [Kernel dispatch])
  bool has_fwd = false, has_bwd_data = false, has_bwd_filter = false;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  size_t fwd_bytes = 0, bwd_data_bytes = 0, bwd_filter_bytes = 0;  // workspace sizes
  ~Plan() {  // best effort: destroy failures at exit have no one to report to
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (w) cudnnDestroyFilterDescriptor(w);
    for (auto* c : {conv_fwd, conv_bwd_data, conv_bwd_filter}) {
      if (c) cudnnDestroyConvolutionDescriptor(c);
    }
  }
};

std::mutex g_plans_mutex;
std::map<PlanKey, std::unique_ptr<Plan>>& plans() {
  static auto* m =
      new std::map<PlanKey, std::unique_ptr<Plan>>();  // leaked: outlives static teardown
  return *m;
}

int to_int(int64_t v, const char* what) {
  LS_CHECK(v >= 0 && v <= INT32_MAX, "conv2d (cuDNN): ", what, " = ", v,
           " does not fit cuDNN's 32-bit sizes; split the batch");
  return static_cast<int>(v);
}

cudnnMathType_t base_math(cudnnDataType_t type) {
  if (type == CUDNN_DATA_BFLOAT16) return CUDNN_TENSOR_OP_MATH;
  return type == CUDNN_DATA_FLOAT && !nn_detail::tf32_enabled() ? CUDNN_FMA_MATH
                                                                : CUDNN_DEFAULT_MATH;
}

// The math mode to run a chosen candidate with: FMA-only for float32 unless TF32 is allowed.
cudnnMathType_t run_math(cudnnDataType_t type, cudnnMathType_t chosen) {
  return type == CUDNN_DATA_FLOAT && !nn_detail::tf32_enabled() ? CUDNN_FMA_MATH : chosen;
}

Plan& plan_for(const native::ConvGeometry& g, ScalarType dtype, Device device) {
  PlanKey key{device.index,
              static_cast<int>(dtype),
              {g.n, g.c_in, g.h, g.w, g.c_out, g.kh, g.kw, g.stride_h, g.stride_w, g.pad_h, g.pad_w,
               g.dil_h, g.dil_w, g.groups}};
  // The caller holds g_plans_mutex.
  auto it = plans().find(key);
  if (it != plans().end()) return *it->second;
  auto plan = std::make_unique<Plan>();
  Plan& p = *plan;
  LS_CHECK(dtype == kFloat32 || dtype == kFloat64 || dtype == kBFloat16, "conv2d (cuDNN): ",
           "expected float32, float64 or bfloat16 tensors but got ", dtype_name(dtype),
           "; convert with .to(ls::kFloat32)");
  p.dtype = dtype;
  p.shapes = native::conv_shapes(g, /*bias=*/false);
  p.type = dtype == kFloat64    ? CUDNN_DATA_DOUBLE
           : dtype == kBFloat16 ? CUDNN_DATA_BFLOAT16
                                : CUDNN_DATA_FLOAT;
  // bf16 data accumulates in float32; the other types in their own.
  const cudnnDataType_t compute = p.type == CUDNN_DATA_BFLOAT16 ? CUDNN_DATA_FLOAT : p.type;
  LS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.x));
  LS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.y));
  LS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.bias));
  LS_CUDNN_CHECK(cudnnCreateFilterDescriptor(&p.w));
  LS_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NCHW, p.type, to_int(g.n, "N"),
                                            to_int(g.c_in, "C_in"), to_int(g.h, "H"),
                                            to_int(g.w, "W")));
  LS_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NCHW, p.type, to_int(g.n, "N"),
                                            to_int(g.c_out, "C_out"), to_int(g.oh, "oH"),
                                            to_int(g.ow, "oW")));
  LS_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.bias, CUDNN_TENSOR_NCHW, p.type, 1,
                                            to_int(g.c_out, "C_out"), 1, 1));
  LS_CUDNN_CHECK(cudnnSetFilter4dDescriptor(p.w, p.type, CUDNN_TENSOR_NCHW,
                                            to_int(g.c_out, "C_out"), to_int(g.c_in_g(), "C_in_g"),
                                            to_int(g.kh, "kH"), to_int(g.kw, "kW")));
  for (auto* c : {&p.conv_fwd, &p.conv_bwd_data, &p.conv_bwd_filter}) {
    LS_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(c));
    LS_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        *c, to_int(g.pad_h, "pad_h"), to_int(g.pad_w, "pad_w"), to_int(g.stride_h, "stride_h"),
        to_int(g.stride_w, "stride_w"), to_int(g.dil_h, "dil_h"), to_int(g.dil_w, "dil_w"),
        CUDNN_CROSS_CORRELATION, compute));
    LS_CUDNN_CHECK(cudnnSetConvolutionGroupCount(*c, to_int(g.groups, "groups")));
    LS_CUDNN_CHECK(cudnnSetConvolutionMathType(*c, base_math(p.type)));
  }
  // cuDNN's own output size must agree with the CPU geometry (it always should).
  int dims[4] = {0, 0, 0, 0};
  LS_CUDNN_CHECK(cudnnGetConvolutionNdForwardOutputDim(p.conv_fwd, p.x, p.w, 4, dims));
  LS_CHECK(dims[0] == g.n && dims[1] == g.c_out && dims[2] == g.oh && dims[3] == g.ow,
           "conv2d (cuDNN): cuDNN computes an output of [", dims[0], ", ", dims[1], ", ", dims[2],
           ", ", dims[3], "] but lockstep expects [", g.n, ", ", g.c_out, ", ", g.oh, ", ", g.ow,
           "]; please report this geometry");
  return *plans().emplace(key, std::move(plan)).first->second;
}

// The algorithm of one direction from cuDNN's ranked list `perf`
// (choose_cudnn_algo, which prints the choice of `pass` with LOCKSTEP_VERBOSE=dispatch),
// with its math type set on `conv`; throws naming `op` and `direction` when none fits.
template <class Perf>
auto take_algo(const Perf* perf, int count, const Plan& p, cudnnConvolutionDescriptor_t conv,
               native::ConvPass pass, const char* op, const char* direction) {
  const cudnnDataType_t type = p.type;
  const int i = choose_cudnn_algo(perf, count, type, nn_detail::tf32_enabled(),
                                  std::string("conv2d.") + native::conv_pass_name(pass), p.dtype, p.shapes);
  LS_CHECK(i >= 0, op, " (cuDNN): no ", direction,
           " algorithm fits this geometry within the 1 GiB workspace cap and the float32 "
           "precision rule; try LOCKSTEP_CUDA_TF32=1 or a smaller batch");
  LS_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, run_math(type, perf[i].mathType)));
  return perf[i].algo;
}

void choose_fwd(Plan& p, cudnnHandle_t h) {
  if (p.has_fwd) return;
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int count = 0;
  LS_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
      h, p.x, p.w, p.conv_fwd, p.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf));
  p.fwd = take_algo(perf, count, p, p.conv_fwd, native::ConvPass::Forward, "conv2d", "forward");
  LS_CUDNN_CHECK(
      cudnnGetConvolutionForwardWorkspaceSize(h, p.x, p.w, p.conv_fwd, p.y, p.fwd, &p.fwd_bytes));
  p.has_fwd = true;
}

void choose_bwd_data(Plan& p, cudnnHandle_t h) {
  if (p.has_bwd_data) return;
  cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  int count = 0;
  LS_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
      h, p.w, p.y, p.conv_bwd_data, p.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf));
  p.bwd_data = take_algo(perf, count, p, p.conv_bwd_data, native::ConvPass::BackwardData, "conv2d_backward",
                         "backward-data");
  LS_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w, p.y, p.conv_bwd_data, p.x,
                                                              p.bwd_data, &p.bwd_data_bytes));
  p.has_bwd_data = true;
}

void choose_bwd_filter(Plan& p, cudnnHandle_t h) {
  if (p.has_bwd_filter) return;
  cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int count = 0;
  LS_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      h, p.x, p.y, p.conv_bwd_filter, p.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf));
  p.bwd_filter = take_algo(perf, count, p, p.conv_bwd_filter, native::ConvPass::BackwardWeights,
                           "conv2d_backward", "backward-filter");
  LS_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x, p.y, p.conv_bwd_filter, p.w,
                                                                p.bwd_filter, &p.bwd_filter_bytes));
  p.has_bwd_filter = true;
}

// A workspace of `bytes` on `device` (kept alive by the returned tensor until the call ends).
Tensor workspace(size_t bytes, Device device) {
  return native::empty({static_cast<int64_t>(bytes > 0 ? bytes : 1)}, kUInt8, device);
}

// cuDNN's alpha/beta: double for double data, float otherwise.
struct Scaling {
  double d_one = 1.0, d_zero = 0.0;
  float f_one = 1.0f, f_zero = 0.0f;
  const void* one(cudnnDataType_t t) const {
    return t == CUDNN_DATA_DOUBLE ? static_cast<const void*>(&d_one) : &f_one;
  }
  const void* zero(cudnnDataType_t t) const {
    return t == CUDNN_DATA_DOUBLE ? static_cast<const void*>(&d_zero) : &f_zero;
  }
};

}  // namespace

Tensor conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias,
                      const IntList& stride, const IntList& padding, const IntList& dilation,
                      int64_t groups) {
  const char* op = "conv2d";
  nn_detail::check_on_device(op, input, {weight, bias});
  const native::ConvGeometry g =
      native::make_conv_geometry(input, weight, bias, stride, padding, dilation, groups, op);
  const Device device = input.device();
  const Tensor x = native::contiguous(input), w = native::contiguous(weight);
  const Tensor b = bias.defined() ? native::contiguous(bias) : Tensor();
  Tensor out = native::empty({g.n, g.c_out, g.oh, g.ow}, x.dtype(), device);  // (N, C_out, oH, oW)
  if (g.n == 0) return out;
  cuda::DeviceGuard guard(device);
  cudnnHandle_t h = cuda::cudnn_handle(device.index);
  const Scaling s;
  Plan* plan = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_plans_mutex);  // Note [cuDNN convolution plans]
    plan = &plan_for(g, x.dtype(), device);
    choose_fwd(*plan, h);
  }
  const Plan& p = *plan;
  const Tensor ws = workspace(p.fwd_bytes, device);
  LS_CUDNN_CHECK(cudnnConvolutionForward(h, s.one(p.type), p.x, x.raw_data(), p.w, w.raw_data(),
                                         p.conv_fwd, p.fwd, ws.raw_data(), p.fwd_bytes,
                                         s.zero(p.type), p.y, out.raw_data()));
  if (b.defined()) {  // y += b per output channel
    LS_CUDNN_CHECK(
        cudnnAddTensor(h, s.one(p.type), p.bias, b.raw_data(), s.one(p.type), p.y, out.raw_data()));
  }
  return out;
}

std::tuple<Tensor, Tensor, Tensor> conv2d_backward(const Tensor& grad_output, const Tensor& input,
                                                   const Tensor& weight, const IntList& stride,
                                                   const IntList& padding, const IntList& dilation,
                                                   int64_t groups, bool need_input,
                                                   bool need_weight, bool need_bias) {
  const char* op = "conv2d_backward";
  LS_CHECK(grad_output.defined(), op, ": grad_output is an undefined tensor");
  nn_detail::check_on_device(op, grad_output, {input, weight});
  const native::ConvGeometry g =
      native::make_conv_geometry(input, weight, Tensor(), stride, padding, dilation, groups, op);
  const IntList out_sizes{g.n, g.c_out, g.oh, g.ow};
  LS_CHECK(grad_output.sizes() == out_sizes && grad_output.dtype() == input.dtype(), op,
           ": grad_output has shape ", grad_output.shape_str(), " and dtype ", grad_output.dtype(),
           " but the output has shape ", shape_str(out_sizes), " and dtype ", input.dtype());
  const Device device = input.device();
  const ScalarType dtype = input.dtype();
  Tensor grad_input, grad_weight, grad_bias;
  if (g.n == 0) {  // an empty batch: nothing flows back
    if (need_input) grad_input = native::empty(input.sizes(), dtype, device);
    if (need_weight) grad_weight = nn_detail::zeros_on(weight.sizes(), dtype, device);
    if (need_bias) grad_bias = nn_detail::zeros_on({g.c_out}, dtype, device);
    return {grad_input, grad_weight, grad_bias};
  }
  const Tensor gy = native::contiguous(grad_output), x = native::contiguous(input),
               w = native::contiguous(weight);
  cuda::DeviceGuard guard(device);
  cudnnHandle_t h = cuda::cudnn_handle(device.index);
  const Scaling s;
  Plan* plan = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_plans_mutex);  // Note [cuDNN convolution plans]
    plan = &plan_for(g, dtype, device);
    if (need_input) choose_bwd_data(*plan, h);
    if (need_weight) choose_bwd_filter(*plan, h);
  }
  const Plan& p = *plan;
  if (need_input) {                                        // dx = conv_transpose(dy, w)
    grad_input = native::empty(x.sizes(), dtype, device);  // (N, C_in, H, W)
    const Tensor ws = workspace(p.bwd_data_bytes, device);
    LS_CUDNN_CHECK(cudnnConvolutionBackwardData(
        h, s.one(p.type), p.w, w.raw_data(), p.y, gy.raw_data(), p.conv_bwd_data, p.bwd_data,
        ws.raw_data(), p.bwd_data_bytes, s.zero(p.type), p.x, grad_input.raw_data()));
  }
  if (need_weight) {                                        // dw = sum over the batch of dy (x) x
    grad_weight = native::empty(w.sizes(), dtype, device);  // (C_out, C_in_g, kH, kW)
    const Tensor ws = workspace(p.bwd_filter_bytes, device);
    LS_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
        h, s.one(p.type), p.x, x.raw_data(), p.y, gy.raw_data(), p.conv_bwd_filter, p.bwd_filter,
        ws.raw_data(), p.bwd_filter_bytes, s.zero(p.type), p.w, grad_weight.raw_data()));
  }
  if (need_bias) {  // db = sum of dy over N, oH, oW
    grad_bias = native::empty({g.c_out}, dtype, device);
    LS_CUDNN_CHECK(cudnnConvolutionBackwardBias(h, s.one(p.type), p.y, gy.raw_data(),
                                                s.zero(p.type), p.bias, grad_bias.raw_data()));
  }
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace lockstep::cuda_native
