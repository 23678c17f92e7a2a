// core/native/conv_folded_gemm.cpp — backward-weights of small-output
// convolutions as one GEMM over the batch (Note [Convolutions as batch-folded
// GEMMs] in conv_folded_gemm.h): the batch-wide im2col and the GEMM.
// Read before: core/native/conv_folded_gemm.h. Read next: core/native/conv_onednn.cpp.
#include "core/native/conv_folded_gemm.h"

#include <string>

#include "core/native/conv_columns.h"
#include "core/native/conv_onednn.h"
#include "core/native/gemm.h"
#include "core/native/native.h"
#include "core/parallel.h"
#include "core/profiler.h"

namespace lockstep::native {

namespace {

// Outputs below this many pixels per image fold the batch into the GEMM; the
// same threshold as the 1x1 layers' (Note [1x1 convolutions as GEMMs]).
constexpr int64_t kFoldPixels = 196;
// Fewer input channels than this stay with oneDNN (see the Note).
constexpr int64_t kMinChannels = 16;

bool folds(const ConvGeometry& g) {
  const bool one_by_one = g.kh == 1 && g.kw == 1 && g.pad_h == 0 && g.pad_w == 0;
  return g.groups == 1 && !one_by_one && g.c_in >= kMinChannels && g.p() < kFoldPixels;
}

}  // namespace

bool conv_folded_gemm_takes_weights(const ConvGeometry& g, bool bias) {
  return !bias && folds(g);
}

bool conv_folded_gemm_backward_weights(const ConvGeometry& g, const float* gy, const float* x,
                                       float* gw, const float* gb) {
  if (!conv_folded_gemm_takes_weights(g, gb != nullptr)) return false;
  // Note [Convolution profile labels]: the name is built only while something records.
  const std::string name = profiler::is_recording()
                               ? conv_profile_label(g, ConvPass::BackwardWeights, "gemm-folded")
                               : std::string();
  profiler::Scope scope(name);
  const int64_t np = g.n * g.p(), k = g.k();
  Tensor gyc = empty({g.c_out, np}, kFloat32);  // (C_out, N P)
  conv_columns::transpose_batch(gy, gyc.data_ptr<float>(), g.n, g.c_out, g.p(),
                                /*to_channel_major=*/true);
  Tensor cols = empty({k, np}, kFloat32);  // (K, N P): image n fills columns n P .. n P + P - 1
  float* c = cols.data_ptr<float>();
  parallel_for(0, g.n, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      conv_columns::im2col(x + n * g.c_in * g.h * g.w, g, c + n * g.p(), np);
    }
  });
  gemm<float>(false, true, g.c_out, k, np, 1.0f, gyc.data_ptr<float>(), np, c, np, 0.0f, gw,
              k);  // gw (C_out, K) = gyc . cols^T
  return true;
}

}  // namespace lockstep::native
