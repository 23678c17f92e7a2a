// core/native/fast/conv_winograd.cpp — whether 3x3 convolutions may run oneDNN's
// Winograd algorithm: the mode (ConvWinograd in conv_onednn.h), its
// environment variable, and the note that explains the choice. The primitives
// themselves are built in conv_onednn.cpp (build / winograd_eligible).
//
// § Note [Winograd convolutions]
// What: oneDNN's Winograd F(4x4, 3x3) kernels (jit_wino_4x3, AVX-512) compute a
// 3x3 convolution from 6x6 input tiles with 36 instead of 144 multiplies per
// 4x4 output tile (plus transforms), for all three passes.
// When: a 3x3, stride-1, undilated, ungrouped float32 convolution with at least
// kFewChannels input and output channels (winograd_eligible) may use it; oneDNN
// declines what it does not implement (then the pass runs direct). Modes
// (ConvWinograd in conv_onednn.h):
//   Auto (default)  Winograd when the output has at least kWinogradMinPixels
//                   (14x14) pixels: the 7x7 layers are slower (a 7x7 image
//                   is 2x2 tiles of 6x6, a quarter of the outputs wasted,
//                   and the weight transform is paid for few tiles;
//                   measured: docs/results/kernel_choices.md). A fixed rule, because a timed choice
//                   differs between processes: it broke the bit-identical
//                   resume tests (tests/examples) and would let DDP ranks run
//                   different algorithms.
//   Timed           the first call of a geometry and pass builds both
//                   primitives, times each on zero-filled buffers (reorders
//                   included, best of 2 after a warm-up, once per geometry)
//                   and keeps the faster: adapts to another
//                   machine, at the cost of reproducibility across processes.
//   Force / Off     Winograd whenever it builds / never.
// Where: oneDNN 2.6's Winograd kernels are AVX-512 ones; on an AVX2 CPU no mode
// finds one and every pass runs direct (conv_winograd_available says which).
// Accuracy cost: the tile transforms scale values by up to 2^3 and back, so
// rounding grows about tenfold against the direct algorithm (the errors
// measured against float64, and the times per layer: docs/results/kernel_choices.md;
// tolerances in tests/core/test_conv_winograd.cpp). Off: LOCKSTEP_CONV_WINOGRAD=0 (or
// set_conv_winograd(ConvWinograd::Off)), e.g. for bit-for-bit comparisons with
// runs that used the direct algorithm. The mode is part of the cache key.
//
//
// Read before: core/native/fast/conv_onednn.h. Read next: core/native/fast/conv_onednn.cpp.
#include <atomic>
#include <cstdlib>
#include <string>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/error.h"
#include "core/native/fast/conv_onednn.h"
#include "core/native/fast/onednn_engine.h"

namespace lockstep::native {

namespace {
// Without LOCKSTEP_CONV_WINOGRAD (Note [Winograd convolutions]).
constexpr ConvWinograd kDefaultWinograd = ConvWinograd::Auto;
std::atomic<int> g_winograd{-1};  // a ConvWinograd, or -1 before the env is read
}  // namespace

ConvWinograd conv_winograd_from_env() {
  const char* v = std::getenv("LOCKSTEP_CONV_WINOGRAD");
  if (v == nullptr || *v == '\0') return kDefaultWinograd;
  const std::string s = v;
  if (s == "0" || s == "off") return ConvWinograd::Off;
  if (s == "1" || s == "auto") return ConvWinograd::Auto;
  if (s == "timed") return ConvWinograd::Timed;
  if (s == "force") return ConvWinograd::Force;
  throw Error(lockstep::detail::str("LOCKSTEP_CONV_WINOGRAD is '", s,
                                    "'; expected 0 / off, 1 / auto, timed or force (Note [Winograd "
                                    "convolutions] in core/native/fast/conv_winograd.cpp)"));
}

void set_conv_winograd(ConvWinograd mode) { g_winograd.store(static_cast<int>(mode)); }

ConvWinograd conv_winograd() {
  int v = g_winograd.load();
  if (v < 0) {
    int expected = -1;
    g_winograd.compare_exchange_strong(expected, static_cast<int>(conv_winograd_from_env()));
    v = g_winograd.load();
  }
  return static_cast<ConvWinograd>(v);
}

bool conv_winograd_available() {
  static const bool available = [] {
    using md = dnnl::memory::desc;
    const auto f32 = dnnl::memory::data_type::f32;
    const auto any = dnnl::memory::format_tag::any;
    const md x({1, 16, 8, 8}, f32, any), w({16, 16, 3, 3}, f32, any), y({1, 16, 8, 8}, f32, any);
    try {
      const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training,
                                              dnnl::algorithm::convolution_winograd, x, w, y,
                                              {1, 1}, {1, 1}, {1, 1});
      dnnl::convolution_forward::primitive_desc pd(d, onednn_detail::cpu_engine());
      return true;
    } catch (const dnnl::error&) {
      return false;  // dnnl_unimplemented: no Winograd kernel for this CPU
    }
  }();
  return available;
}

const char* conv_winograd_name(ConvWinograd mode) {
  switch (mode) {
    case ConvWinograd::Off: return "off";
    case ConvWinograd::Auto: return "auto";
    case ConvWinograd::Timed: return "timed";
    case ConvWinograd::Force: return "force";
  }
  return "unknown";
}

}  // namespace lockstep::native

