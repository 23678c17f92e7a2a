// core/native/conv.cpp — 2-d convolution, forward and backward: the argument
// checks, the backend switch, each pass run on the implementation choose_conv
// names (conv_dispatch.cpp), and the im2col + GEMM path.
//
// float32 runs on oneDNN's convolution primitives by default (fast/conv_onednn.cpp,
// see Note [Convolution backends] in fast/conv_onednn.h), some 1x1 layers and the
// outputs under 16 pixels on GEMMs (fast/conv_1x1_gemm.h, fast/conv_folded_gemm.h);
// the im2col path below is float64's path, the
// Reference backend's, and the fallback for geometries oneDNN has no fast kernel
// for. All of them are tested against the plain loops of core/native/reference/.
//
// § Note [Convolution as a matrix product]
// For one image and one group, with K = C_in_g * kH * kW input values under a
// kernel window and P = oH * oW output positions, im2col copies every window
// into one column of a matrix
//     cols (K, P):  cols[(c, ki, kj), (oy, ox)] = x[c, oy*sh - ph + ki*dh, ox*sw - pw + kj*dw]
// (zero where that position falls in the padding). Then the convolution is one GEMM:
//     y_g (C_out_g, P) = W_g (C_out_g, K) . cols (K, P)   (+ bias per row)
// and so is each part of its backward, with G = dL/dy_g (C_out_g, P):
//     dW_g (C_out_g, K) += G . cols^T                 summed over the batch
//     dcols (K, P)       = W_g^T . G,   dx = col2im(dcols)
//     db (C_out)         = sum of G over the batch and P
// col2im is im2col's adjoint: it adds every column entry back to the input
// position it was copied from (overlapping windows add up).
// Fast path: a 1x1 kernel with stride 1 and no padding has cols == x_g (C_in_g, H*W)
// itself, so the GEMMs read and write the image directly, with no copies.
//
// Threads: images are independent, so forward and grad_input run in parallel
// over the batch, each thread with its own cols buffer and single-threaded GEMMs.
// grad_weight sums over the batch, so each thread sums its images into its own
// partial (C_out, K) buffer and the partials are added at the end. With one
// image (or one thread) the loop runs on the caller and each GEMM uses every thread.
//
// Read before: core/native/nn_kernels.h, core/native/gemm.h, core/native/conv_geometry.h.
// Read next: core/native/fast/conv_onednn.h, core/native/pool.cpp, autograd/functions/conv.cpp.
#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <tuple>

#include "core/native/conv_columns.h"
#include "core/native/conv_dispatch.h"
#include "core/native/conv_geometry.h"
#include "core/native/fast/conv_1x1_gemm.h"
#include "core/native/fast/conv_folded_gemm.h"
#include "core/native/fast/conv_onednn.h"
#include "core/native/cuda_dispatch.h"
#include "core/native/gemm.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/parallel.h"
#include "core/shape.h"

namespace lockstep::native {

std::pair<int64_t, int64_t> pair_param(const IntList& values, const char* op, const char* what) {
  LS_CHECK(values.size() == 1 || values.size() == 2, op, ": ", what,
           " must have 1 or 2 values ({v} for both dims, or {h, w}) but got ", values.size(),
           " values ", shape_str(values));
  return {values.front(), values.back()};
}

namespace {

std::string hw_str(int64_t h, int64_t w) { return lockstep::detail::str(h, "x", w); }

std::atomic<ConvBackend> g_conv_backend{ConvBackend::OneDNN};

}  // namespace

void set_conv_backend(ConvBackend backend) { g_conv_backend.store(backend); }
ConvBackend conv_backend() { return g_conv_backend.load(); }

const char* conv_backend_name(ConvBackend backend) {
  switch (backend) {
    case ConvBackend::Reference: return "reference";
    case ConvBackend::OneDNN: return "onednn";
  }
  return "unknown";
}

ConvGeometry make_conv_geometry(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                const IntList& stride, const IntList& padding,
                                const IntList& dilation, int64_t groups, const char* op) {
  lockstep::detail::check_defined(input, op);
  lockstep::detail::check_defined(weight, op);
  LS_CHECK(input.dim() == 4, op, ": expected a 4-d input (N, C, H, W) but got shape ",
           input.shape_str(), "; add a batch dim with .unsqueeze(0) for a single image");
  LS_CHECK(weight.dim() == 4, op,
           ": expected a 4-d weight (C_out, C_in / groups, kH, kW) but got shape ",
           weight.shape_str());
  // bfloat16 pairs are the autocast kernels' (conv_bf16.h); everything else computes in f32/f64.
  LS_CHECK(input.is_floating_point() && input.dtype() == weight.dtype() &&
               (input.dtype() == kFloat32 || input.dtype() == kFloat64 ||
                input.dtype() == kBFloat16),
           op, ": input (", input.dtype(), ") and weight (", weight.dtype(),
           ") must both be float32 or both float64; convert with .to(...)");
  ConvGeometry g{};
  g.n = input.size(0);
  g.c_in = input.size(1);
  g.h = input.size(2);
  g.w = input.size(3);
  g.c_out = weight.size(0);
  g.kh = weight.size(2);
  g.kw = weight.size(3);
  std::tie(g.stride_h, g.stride_w) = pair_param(stride, op, "stride");
  std::tie(g.pad_h, g.pad_w) = pair_param(padding, op, "padding");
  std::tie(g.dil_h, g.dil_w) = pair_param(dilation, op, "dilation");
  g.groups = groups;
  LS_CHECK(g.stride_h > 0 && g.stride_w > 0, op, ": stride must be positive but got ",
           shape_str(stride));
  LS_CHECK(g.pad_h >= 0 && g.pad_w >= 0, op, ": padding must be non-negative but got ",
           shape_str(padding));
  LS_CHECK(g.dil_h > 0 && g.dil_w > 0, op, ": dilation must be positive but got ",
           shape_str(dilation));
  LS_CHECK(groups > 0, op, ": groups must be positive but got ", groups);
  LS_CHECK(g.c_out % groups == 0, op, ": weight ", weight.shape_str(), " has ", g.c_out,
           " output channels, which is not divisible by groups = ", groups);
  LS_CHECK(g.c_in == weight.size(1) * groups, op, ": input ", input.shape_str(), " has ", g.c_in,
           " channels but weight ", weight.shape_str(), " with groups = ", groups, " expects ",
           weight.size(1) * groups, " (C_in must equal weight.size(1) * groups)");
  if (bias.defined()) {
    LS_CHECK(bias.dim() == 1 && bias.size(0) == g.c_out, op, ": bias must have shape [", g.c_out,
             "] (one per output channel) but got ", bias.shape_str());
    LS_CHECK(bias.dtype() == input.dtype(), op, ": bias is ", bias.dtype(), " but input is ",
             input.dtype(), "; convert with .to(...)");
  }
  const int64_t span_h = g.dil_h * (g.kh - 1) + 1, span_w = g.dil_w * (g.kw - 1) + 1;
  g.oh = (g.h + 2 * g.pad_h - span_h) / g.stride_h + 1;
  g.ow = (g.w + 2 * g.pad_w - span_w) / g.stride_w + 1;
  const bool fits = g.h + 2 * g.pad_h >= span_h && g.w + 2 * g.pad_w >= span_w;
  LS_CHECK(fits && g.oh > 0 && g.ow > 0, op, ": input ", hw_str(g.h, g.w),
           " is too small for kernel ", hw_str(g.kh, g.kw), " with padding ",
           g.pad_h == g.pad_w ? std::to_string(g.pad_h) : hw_str(g.pad_h, g.pad_w),
           (g.dil_h == 1 && g.dil_w == 1 ? "" : " and dilation " + hw_str(g.dil_h, g.dil_w)),
           " (input shape ", input.shape_str(),
           "); use a larger input, more padding or a smaller kernel");
  return g;
}

namespace {

using conv_columns::col2im;
using conv_columns::im2col;

// An uninitialised scratch buffer for one thread's cols (none on the 1x1 fast path).
template <class T>
std::unique_ptr<T[]> cols_buffer(const ConvGeometry& g) {
  return std::make_unique_for_overwrite<T[]>(g.is_pointwise() ? 0 : g.k() * g.p());
}

// y_n (C_out, P) for one image x_n (C_in, H, W).
template <class T>
void conv_image(const T* x_n, const T* w, const T* bias, const ConvGeometry& g, T* cols, T* y_n) {
  const int64_t k = g.k(), p = g.p(), c_out_g = g.c_out_g();
  if (bias != nullptr) {
    for (int64_t co = 0; co < g.c_out; ++co) std::fill(y_n + co * p, y_n + (co + 1) * p, bias[co]);
  }
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    const T* x_g = x_n + grp * g.c_in_g() * g.h * g.w;  // (C_in_g, H, W)
    const T* cols_g = x_g;                              // 1x1 fast path: cols == x_g
    if (!g.is_pointwise()) {
      im2col(x_g, g, cols);
      cols_g = cols;
    }
    gemm<T>(false, false, c_out_g, p, k, T(1), w + grp * c_out_g * k, k, cols_g, p,
            bias != nullptr ? T(1) : T(0), y_n + grp * c_out_g * p, p);
  }
}

// One image's share of the backward: grad_w (C_out, K) += ..., gx_n (C_in, H, W) = ...
// (either may be null when not wanted).
template <class T>
void conv_image_backward(const T* gy_n, const T* x_n, const T* w, const ConvGeometry& g, T* cols,
                         T* grad_w, T* gx_n) {
  const int64_t k = g.k(), p = g.p(), c_out_g = g.c_out_g();
  const int64_t group_in = g.c_in_g() * g.h * g.w;
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    const T* gy_g = gy_n + grp * c_out_g * p;  // G (C_out_g, P)
    const T* w_g = w + grp * c_out_g * k;      // W_g (C_out_g, K)
    if (grad_w != nullptr) {
      const T* cols_g = x_n + grp * group_in;
      if (!g.is_pointwise()) {
        im2col(cols_g, g, cols);
        cols_g = cols;
      }
      gemm<T>(false, true, c_out_g, k, p, T(1), gy_g, p, cols_g, p, T(1),
              grad_w + grp * c_out_g * k,
              k);  // dW_g += G . cols^T
    }
    if (gx_n != nullptr) {
      T* gx_g = gx_n + grp * group_in;
      if (g.is_pointwise()) {
        gemm<T>(true, false, k, p, c_out_g, T(1), w_g, k, gy_g, p, T(0), gx_g, p);
      } else {
        gemm<T>(true, false, k, p, c_out_g, T(1), w_g, k, gy_g, p, T(0), cols, p);  // W_g^T . G
        col2im(cols, g, gx_g);
      }
    }
  }
}

// db[co] = sum over n and P of G (N, C_out, P), accumulated in double.
Tensor reference_bias_grad(const Tensor& gy, const ConvGeometry& g) {
  Tensor grad_bias = empty({g.c_out}, gy.dtype());  // (C_out)
  dispatch_floating(gy.dtype(), "conv2d_backward", [&]<class T>() {
    const T* gyp = gy.data_ptr<T>();
    T* gb = grad_bias.data_ptr<T>();
    const int64_t p = g.p();
    parallel_for(0, g.c_out, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t co = lo; co < hi; ++co) {
        double s = 0;
        for (int64_t n = 0; n < g.n; ++n) {
          const T* row = gyp + (n * g.c_out + co) * p;
          for (int64_t i = 0; i < p; ++i) s += row[i];
        }
        gb[co] = static_cast<T>(s);
      }
    });
  });
  return grad_bias;
}

// (grad_input, grad_weight) by im2col + GEMM; each is undefined unless asked for.
// grad_input is added into input_sum when that is defined (col2im adds anyway).
std::pair<Tensor, Tensor> reference_backward(const Tensor& gy, const Tensor& x, const Tensor& w,
                                             const ConvGeometry& g, bool need_input,
                                             bool need_weight, const Tensor& input_sum) {
  Tensor grad_input, grad_weight;
  if (!need_input && !need_weight) return {grad_input, grad_weight};
  dispatch_floating(x.dtype(), "conv2d_backward", [&]<class T>() {
    // One chunk of images per thread, each with its own partial grad_weight.
    const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(get_num_threads(), g.n));
    const int64_t w_numel = w.numel();
    Tensor partial =
        need_weight ? zeros({chunks, w_numel}, x.dtype()) : Tensor();  // (chunks, C_out*K)
    if (need_input) {  // col2im adds into it
      grad_input = input_sum.defined() ? input_sum : zeros(x.sizes(), x.dtype());
    }
    const T* gyp = gy.data_ptr<T>();
    const T* xp = x.data_ptr<T>();
    const T* wp = w.data_ptr<T>();
    T* pw = need_weight ? partial.data_ptr<T>() : nullptr;
    T* gxp = need_input ? grad_input.data_ptr<T>() : nullptr;
    const int64_t in_numel = g.c_in * g.h * g.w, out_numel = g.c_out * g.p();
    parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
      auto cols = cols_buffer<T>(g);
      for (int64_t c = lo; c < hi; ++c) {
        for (int64_t n = g.n * c / chunks; n < g.n * (c + 1) / chunks; ++n) {
          conv_image_backward(gyp + n * out_numel, xp + n * in_numel, wp, g, cols.get(),
                              pw != nullptr ? pw + c * w_numel : nullptr,
                              gxp != nullptr ? gxp + n * in_numel : nullptr);
        }
      }
    });
    if (need_weight) {
      grad_weight = chunks == 1 ? partial : sum(partial, {0}, /*keepdim=*/false);
      grad_weight = reshape(grad_weight, w.sizes());
    }
  });
  return {grad_input, grad_weight};
}

bool is_gemm_1x1(ConvImpl impl) {
  return impl == ConvImpl::Gemm1x1 || impl == ConvImpl::Gemm1x1Folded;
}

}  // namespace

namespace {

// conv2d_forward; with `workspace`, the oneDNN and 1x1 GEMM paths may leave one
// there (Note [Convolution workspace]).
Tensor forward(const Tensor& input, const Tensor& weight, const Tensor& bias,
               const IntList& stride, const IntList& padding, const IntList& dilation,
               int64_t groups, std::shared_ptr<const ConvWorkspace>* workspace) {
  const char* op = "conv2d";
  const ConvGeometry g =
      make_conv_geometry(input, weight, bias, stride, padding, dilation, groups, op);
  const Tensor x = contiguous(input), w = contiguous(weight);
  const Tensor b = bias.defined() ? contiguous(bias) : Tensor();
  Tensor out = empty({g.n, g.c_out, g.oh, g.ow}, x.dtype());  // (N, C_out, oH, oW)
  const ConvImpl impl = choose_conv(g, x.dtype(), ConvPass::Forward, b.defined());
  if (impl != ConvImpl::Im2colGemm) {  // float32; each returns false if it declines after all
    const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
    const float* xp = x.data_ptr<float>();
    const float* wp = w.data_ptr<float>();
    float* yp = out.data_ptr<float>();
    bool done = false;
    if (is_gemm_1x1(impl)) {
      done = conv1x1_gemm_forward(g, xp, wp, bp, yp, workspace);
    } else if (impl == ConvImpl::Im2rowFolded) {
      done = conv_folded_gemm_forward(g, xp, wp, yp, workspace);
    } else {
      done = conv2d_forward_onednn(g, xp, wp, bp, yp, workspace);
    }
    if (done) return out;
  }
  dispatch_floating(x.dtype(), op, [&]<class T>() {
    const T* xp = x.data_ptr<T>();
    const T* wp = w.data_ptr<T>();
    const T* bp = b.defined() ? b.data_ptr<T>() : nullptr;
    T* yp = out.data_ptr<T>();
    parallel_for(0, g.n, 1, [&](int64_t lo, int64_t hi) {
      auto cols = cols_buffer<T>(g);
      for (int64_t n = lo; n < hi; ++n) {
        conv_image(xp + n * g.c_in * g.h * g.w, wp, bp, g, cols.get(), yp + n * g.c_out * g.p());
      }
    });
  });
  return out;
}

}  // namespace

Tensor conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias,
                      const IntList& stride, const IntList& padding, const IntList& dilation,
                      int64_t groups) {
  LS_DISPATCH_CUDA(input, conv2d_forward(input, weight, bias, stride, padding, dilation, groups));
  return forward(input, weight, bias, stride, padding, dilation, groups, nullptr);
}

std::tuple<Tensor, std::shared_ptr<const ConvWorkspace>> conv2d_forward_training(
    const Tensor& input, const Tensor& weight, const Tensor& bias, const IntList& stride,
    const IntList& padding, const IntList& dilation, int64_t groups) {
  std::shared_ptr<const ConvWorkspace> workspace;
  if (input.defined() && input.device().is_cuda()) {  // cuDNN keeps no workspace of ours
    return {conv2d_forward(input, weight, bias, stride, padding, dilation, groups), workspace};
  }
  Tensor out = forward(input, weight, bias, stride, padding, dilation, groups, &workspace);
  return {out, workspace};
}

namespace {

// conv2d_backward with the extras of conv2d_backward_with.
std::tuple<Tensor, Tensor, Tensor> backward(const Tensor& grad_output, const Tensor& input,
                                            const Tensor& weight, const IntList& stride,
                                            const IntList& padding, const IntList& dilation,
                                            int64_t groups, bool need_input, bool need_weight,
                                            bool need_bias, const ConvBackwardExtras& extras,
                                            const char* op) {
  const Tensor& input_sum = extras.grad_input_sum;
  const ConvGeometry g =
      make_conv_geometry(input, weight, Tensor(), stride, padding, dilation, groups, op);
  lockstep::detail::check_defined(grad_output, op);
  const IntList out_sizes{g.n, g.c_out, g.oh, g.ow};
  LS_CHECK(grad_output.sizes() == out_sizes && grad_output.dtype() == input.dtype(), op,
           ": grad_output has shape ", grad_output.shape_str(), " and dtype ", grad_output.dtype(),
           " but the output has shape ", shape_str(out_sizes), " and dtype ", input.dtype());
  const Tensor gy = contiguous(grad_output), x = contiguous(input), w = contiguous(weight);
  const bool summing = input_sum.defined();
  Tensor grad_input, grad_weight, grad_bias;
  // Each pass on the implementation choose_conv names (conv_dispatch.cpp); a
  // pass a fast path leaves undone (oneDNN declining after all) runs im2col below.
  const ConvImpl data = need_input ? choose_conv(g, x.dtype(), ConvPass::BackwardData, false)
                                   : ConvImpl::Im2colGemm;
  const ConvImpl weights = need_weight
                               ? choose_conv(g, x.dtype(), ConvPass::BackwardWeights, need_bias)
                               : ConvImpl::Im2colGemm;
  if (data != ConvImpl::Im2colGemm || weights != ConvImpl::Im2colGemm) {  // float32
    const bool fast_input = data != ConvImpl::Im2colGemm;
    const bool fast_weight = weights != ConvImpl::Im2colGemm;
    if (fast_input) grad_input = summing ? input_sum : empty(x.sizes(), kFloat32);  // (N, C_in, H, W)
    if (fast_weight) grad_weight = empty(w.sizes(), kFloat32);  // (C_out, C_in_g, kH, kW)
    if (weights == ConvImpl::OneDNN && need_bias) grad_bias = empty({g.c_out}, kFloat32);  // (C_out)
    const float* gyp = gy.data_ptr<float>();
    const float* xp = x.data_ptr<float>();
    const float* wp = w.data_ptr<float>();
    float* gxp = fast_input ? grad_input.data_ptr<float>() : nullptr;
    float* gwp = fast_weight ? grad_weight.data_ptr<float>() : nullptr;
    float* gbp = grad_bias.defined() ? grad_bias.data_ptr<float>() : nullptr;
    // Note [1x1 convolutions as GEMMs] first, then Note [Small-output convolutions
    // as batch-folded GEMMs], then the oneDNN primitives.
    const ConvBackwardDone by_gemm = conv1x1_gemm_backward(
        g, gyp, xp, wp, is_gemm_1x1(data) ? gxp : nullptr, is_gemm_1x1(weights) ? gwp : nullptr,
        nullptr, summing, extras.workspace.get());
    const ConvImpl folded = ConvImpl::Im2rowFolded;
    const ConvBackwardDone by_folded = conv_folded_gemm_backward(
        g, gyp, xp, wp, data == folded ? gxp : nullptr, weights == folded ? gwp : nullptr,
        summing, extras.workspace.get());
    const ConvBackwardDone by_onednn = conv2d_backward_onednn(
        g, gyp, xp, wp, data == ConvImpl::OneDNN ? gxp : nullptr,
        weights == ConvImpl::OneDNN ? gwp : nullptr, gbp, summing, extras.workspace.get());
    if (!by_gemm.input && !by_folded.input && !by_onednn.input) grad_input = Tensor();
    if (!by_gemm.weight && !by_folded.weight && !by_onednn.weight) {
      grad_weight = grad_bias = Tensor();
    }
  }
  if (need_bias && !grad_bias.defined()) grad_bias = reference_bias_grad(gy, g);
  auto [ref_input, ref_weight] =
      reference_backward(gy, x, w, g, need_input && !grad_input.defined(),
                         need_weight && !grad_weight.defined(), input_sum);
  if (ref_input.defined()) grad_input = ref_input;
  if (ref_weight.defined()) grad_weight = ref_weight;
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> conv2d_backward(const Tensor& grad_output, const Tensor& input,
                                                   const Tensor& weight, const IntList& stride,
                                                   const IntList& padding, const IntList& dilation,
                                                   int64_t groups, bool need_input,
                                                   bool need_weight, bool need_bias) {
  LS_DISPATCH_CUDA(input, conv2d_backward(grad_output, input, weight, stride, padding, dilation,
                                          groups, need_input, need_weight, need_bias));
  return backward(grad_output, input, weight, stride, padding, dilation, groups, need_input,
                  need_weight, need_bias, {}, "conv2d_backward");
}

std::tuple<Tensor, Tensor, Tensor> conv2d_backward_with(
    const ConvBackwardExtras& extras, const Tensor& grad_output, const Tensor& input,
    const Tensor& weight, const IntList& stride, const IntList& padding, const IntList& dilation,
    int64_t groups, bool need_input, bool need_weight, bool need_bias) {
  const char* op = "conv2d_backward_with";
  const Tensor& sum = extras.grad_input_sum;
  if (!sum.defined() && extras.workspace == nullptr) {
    return conv2d_backward(grad_output, input, weight, stride, padding, dilation, groups,
                           need_input, need_weight, need_bias);
  }
  lockstep::detail::check_defined(input, op);
  LS_CHECK(input.device().is_cpu(), op,
           ": grad_input_sum and workspaces are for CPU tensors; on a GPU use conv2d_backward "
           "and add the result");
  if (sum.defined()) {
    LS_CHECK(sum.device().is_cpu() && sum.sizes() == input.sizes() &&
                 sum.dtype() == input.dtype() && sum.is_contiguous() && sum.storage_offset() == 0,
             op, ": grad_input_sum must be a contiguous CPU ", input.dtype(),
             " tensor of the input's shape ", input.shape_str(), " but has shape ",
             sum.shape_str(), " and dtype ", sum.dtype(), " on ", sum.device().str());
  }
  return backward(grad_output, input, weight, stride, padding, dilation, groups,
                  need_input || sum.defined(), need_weight, need_bias, extras, op);
}

}  // namespace lockstep::native
