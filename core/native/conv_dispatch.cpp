// core/native/conv_dispatch.cpp — the rules that pick a convolution pass's
// implementation: every CPU path of conv2d, and when it runs, on one screen.
//
// float32 / float64 (choose_conv), in order:
//   1. float64, the Reference backend (set_conv_backend), or an empty batch: im2col_gemm.
//   2. A 1x1 unpadded ungrouped layer (Note [1x1 convolutions as GEMMs] in
//      fast/conv_1x1_gemm.h): backward-data always, forward and backward-weights
//      (without bias) when strided or with an output under kFoldPixels:
//      gemm_1x1, or gemm_1x1_folded for the small outputs.
//   3. An ungrouped layer without bias whose output has under 16 pixels and at
//      least 16 channels (Note [Small-output convolutions as batch-folded GEMMs]
//      in fast/conv_folded_gemm.h): im2row_folded, every pass.
//   4. A oneDNN primitive when oneDNN has a fast one for this geometry, pass and
//      layout plan (Note [oneDNN convolution layouts]; Winograd or direct by
//      LOCKSTEP_CONV_WINOGRAD, Note [Winograd convolutions]): onednn. Finding
//      out builds the primitive, which is cached, so the pass then runs it.
//   5. Otherwise (oneDNN declined): im2col_gemm.
//   The bias gradient comes from the backward-weights primitive when that pass
//   runs onednn with `bias`, else from conv.cpp's sum over grad_output.
// bfloat16 (choose_conv_bf16), in order:
//   1. A 1x1 unpadded ungrouped layer, not on the Reference backend: bf16_gemm_1x1
//      (LOCKSTEP_BF16_1X1_GEMM=0 turns it off). Its passes are gemm_bf16 calls, so
//      they also run where oneDNN has no bf16 kernels when the CPU has AVX2
//      (Note [bf16 GEMM in AVX2 registers]), reading the bf16 activations in place.
//   2. The Reference backend, or a CPU where oneDNN has no bf16 kernels (Note [bf16
//      without oneDNN kernels] in gemm_bf16_via_float32.cpp): bf16_via_float32 (the
//      float32 rules above, then rounding).
//   3. A stride-1 layer over at most 27 taps (C_in kH kW): bf16_direct
//      (LOCKSTEP_BF16_DIRECT_CONV=0 turns it off).
//   4. backward-data whose phases are forward convolutions of dy:
//      bf16_input_grad_as_forward (LOCKSTEP_BF16_DGRAD_FORWARD=0 turns it off).
//   5. backward-weights on small images or large kernels over few channels:
//      bf16_weight_grad_gemm (LOCKSTEP_BF16_WGRAD_GEMM=0 turns it off).
//   6. Otherwise: bf16_onednn.
// Each predicate lives beside its implementation (the file ConvImpl names) and
// says why its thresholds are what they are.
//
// Read before: core/native/conv_dispatch.h. Read next: core/native/conv.cpp.
#include "core/native/conv_dispatch.h"

#include <string>

#include "core/native/conv_bf16.h"
#include "core/native/dispatch_verbose.h"
#include "core/native/fast/conv_1x1_gemm.h"
#include "core/native/fast/conv_folded_gemm.h"
#include "core/native/fast/conv_onednn.h"
#include "core/native/fast/gemm_bf16_avx2.h"
#include "core/native/fast/onednn_engine.h"
#include "core/native/nn_kernels.h"

namespace lockstep::native {

namespace {

ConvImpl logged(ConvImpl impl, const ConvGeometry& g, ScalarType dtype, ConvPass pass, bool bias) {
  if (dispatch_verbose()) {
    log_dispatch(std::string("conv2d.") + conv_pass_name(pass), conv_impl_name(impl), dtype,
                 conv_shapes(g, bias));
  }
  return impl;
}

ConvImpl float_impl(const ConvGeometry& g, ScalarType dtype, ConvPass pass, bool bias) {
  if (dtype != kFloat32 || conv_backend() == ConvBackend::Reference || g.n == 0) {
    return ConvImpl::Im2colGemm;
  }
  if (conv1x1_gemm_takes(g, pass, bias)) {
    return conv1x1_gemm_folds(g) ? ConvImpl::Gemm1x1Folded : ConvImpl::Gemm1x1;
  }
  if (conv_folded_gemm_takes(g, pass, bias)) return ConvImpl::Im2rowFolded;
  if (conv_onednn_has_primitive(g, pass, bias)) return ConvImpl::OneDNN;
  return ConvImpl::Im2colGemm;
}

ConvImpl bf16_impl(const ConvGeometry& g, ConvPass pass, const Tensor& grad_output,
                   ScalarType grad_input_dtype) {
  if (conv_bf16_runs_pointwise_gemm(g)) return ConvImpl::Bf16Gemm1x1;
  if (conv_bf16_runs_via_float32()) return ConvImpl::Bf16ViaFloat32;
  if (conv_bf16_is_direct(g)) return ConvImpl::Bf16Direct;
  if (pass == ConvPass::BackwardData &&
      conv_bf16_input_grad_as_forward(g, grad_output, grad_input_dtype)) {
    return ConvImpl::Bf16InputGradAsForward;
  }
  if (pass == ConvPass::BackwardWeights && conv_bf16_weight_grad_as_gemm(g)) {
    return ConvImpl::Bf16WeightGradGemm;
  }
  return ConvImpl::Bf16OneDNN;
}

}  // namespace

std::string conv_shapes(const ConvGeometry& g, bool bias) {
  return lockstep::detail::str("x (", g.n, ", ", g.c_in, ", ", g.h, ", ", g.w, ") w (", g.c_out,
                               ", ", g.c_in_g(), ", ", g.kh, ", ", g.kw, ")",
                               bias ? " bias" : "", " stride ", g.stride_h, "x", g.stride_w,
                               " padding ", g.pad_h, "x", g.pad_w, " dilation ", g.dil_h, "x",
                               g.dil_w, " groups ", g.groups);
}

const char* conv_pass_name(ConvPass pass) {
  switch (pass) {
    case ConvPass::Forward: return "forward";
    case ConvPass::BackwardData: return "backward_data";
    case ConvPass::BackwardWeights: return "backward_weights";
  }
  return "unknown";
}

const char* conv_impl_name(ConvImpl impl) {
  switch (impl) {
    case ConvImpl::Im2colGemm: return "im2col_gemm";
    case ConvImpl::Gemm1x1: return "gemm_1x1";
    case ConvImpl::Gemm1x1Folded: return "gemm_1x1_folded";
    case ConvImpl::Im2rowFolded: return "im2row_folded";
    case ConvImpl::OneDNN: return "onednn";
    case ConvImpl::Bf16ViaFloat32: return "bf16_via_float32";
    case ConvImpl::Bf16Gemm1x1: return "bf16_gemm_1x1";
    case ConvImpl::Bf16Direct: return "bf16_direct";
    case ConvImpl::Bf16InputGradAsForward: return "bf16_input_grad_as_forward";
    case ConvImpl::Bf16WeightGradGemm: return "bf16_weight_grad_gemm";
    case ConvImpl::Bf16OneDNN: return "bf16_onednn";
  }
  return "unknown";
}

ConvImpl choose_conv(const ConvGeometry& g, ScalarType dtype, ConvPass pass, bool bias) {
  return logged(float_impl(g, dtype, pass, bias), g, dtype, pass, bias);
}

bool conv_bf16_runs_via_float32() {
  return conv_backend() == ConvBackend::Reference || !onednn_detail::has_bf16();
}

bool conv_bf16_runs_pointwise_gemm(const ConvGeometry& g) {
  return conv_backend() != ConvBackend::Reference && conv_bf16_is_pointwise_gemm(g) &&
         (onednn_detail::has_bf16() || detail::gemm_bf16_avx2_available());
}

ConvImpl choose_conv_bf16(const ConvGeometry& g, ConvPass pass, const Tensor& grad_output,
                          ScalarType grad_input_dtype) {
  return logged(bf16_impl(g, pass, grad_output, grad_input_dtype), g, kBFloat16, pass, false);
}

}  // namespace lockstep::native
