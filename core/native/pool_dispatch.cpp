// core/native/pool_dispatch.cpp — the rules that pick max_pool2d's implementation.
//
// Forward (choose_max_pool), in order:
//   1. A bf16 image stored channels-last: channels_last_bf16 (its output and
//      indices are channels-last too; Note [Channel-vector max-pool in AVX-512]).
//   2. float32 or bf16 with 2x2 windows at stride 2, unpadded: 2x2 (Note [2x2 max-pool]).
//   3. Unpadded windows no wider than their stride (<= 4) on short output rows:
//      side_by_side (Note [Max-pool fast path] in pool.cpp).
//   4. float32 or bf16 where the separable kernels take the window: separable
//      (Note [Separable max-pool] in fast/pool_max_fast.cpp).
//   5. Otherwise: windows (float64 always ends at 3 or here).
// Backward (choose_max_pool_backward): channels_last_bf16 when the forward was
// (its indices are channels-last), else scatter.
//
// Read before: core/native/pool_dispatch.h. Read next: core/native/pool.cpp.
#include "core/native/pool_dispatch.h"

#include "core/native/dispatch_verbose.h"
#include "core/native/fast/pool_max_2x2.h"
#include "core/native/fast/pool_max_fast.h"
#include "core/native/memory_format.h"

namespace lockstep::native {

namespace {

MaxPoolImpl forward_impl(const Tensor& input, const rules::PoolWindow& win) {
  const bool bf16 = input.dtype() == kBFloat16;
  if (bf16 && stored_channels_last(input)) return MaxPoolImpl::ChannelsLastBf16;
  const bool float_kernels = bf16 || input.dtype() == kFloat32;
  if (float_kernels && detail::max_pool_2x2_applies(win)) return MaxPoolImpl::TwoByTwo;
  if (max_pool_side_by_side_applies(win)) return MaxPoolImpl::SideBySide;
  if (float_kernels && detail::separable_max_pool_applies(win)) return MaxPoolImpl::Separable;
  return MaxPoolImpl::Windows;
}

MaxPoolImpl logged(MaxPoolImpl impl, const char* family, const Tensor& t,
                   const rules::PoolWindow& win) {
  if (dispatch_verbose()) {
    log_dispatch(family, max_pool_impl_name(impl), t.dtype(),
                 lockstep::detail::str("x (", t.size(0), ", ", t.size(1), ", ", win.h, ", ",
                                       win.w, ") kernel ", win.kh, "x", win.kw, " stride ",
                                       win.sh, "x", win.sw, " padding ", win.ph, "x", win.pw));
  }
  return impl;
}

}  // namespace

const char* max_pool_impl_name(MaxPoolImpl impl) {
  switch (impl) {
    case MaxPoolImpl::ChannelsLastBf16: return "channels_last_bf16";
    case MaxPoolImpl::TwoByTwo: return "2x2";
    case MaxPoolImpl::SideBySide: return "side_by_side";
    case MaxPoolImpl::Separable: return "separable";
    case MaxPoolImpl::Windows: return "windows";
    case MaxPoolImpl::Scatter: return "scatter";
  }
  return "unknown";
}

MaxPoolImpl choose_max_pool(const Tensor& input, const rules::PoolWindow& win) {
  return logged(forward_impl(input, win), "max_pool2d.forward", input, win);
}

MaxPoolImpl choose_max_pool_backward(const Tensor& grad_output, const Tensor& indices) {
  const MaxPoolImpl impl = grad_output.dtype() == kBFloat16 && stored_channels_last(indices)
                               ? MaxPoolImpl::ChannelsLastBf16
                               : MaxPoolImpl::Scatter;
  if (dispatch_verbose()) {
    log_dispatch("max_pool2d.backward", max_pool_impl_name(impl), grad_output.dtype(),
                 lockstep::detail::str("grad_output ", grad_output.shape_str()));
  }
  return impl;
}

}  // namespace lockstep::native
