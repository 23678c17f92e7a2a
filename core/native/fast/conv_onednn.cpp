// core/native/fast/conv_onednn.cpp — the oneDNN primitives of conv2d's forward,
// backward-data and backward-weights: built per geometry and layout plan, kept
// in a process-wide cache, and run on our buffers with the reorders around them
// (see Note [Convolution backends]). The passes that use them are in
// conv_onednn_passes.cpp.
//
// How each pass picks its layouts: Note [oneDNN convolution layouts] in
// conv_onednn_layout.h.
// Winograd for 3x3 layers: Note [Winograd convolutions] in conv_winograd.cpp.
//
// § Note [oneDNN scratch memory]
// Every primitive is built with scratchpad mode "user", so oneDNN allocates
// nothing itself: its scratchpad, and the blocked copies of the arguments, are
// tensors that the call allocates (ScratchArena) and frees when it returns.
// They used to be per-thread buffers kept between calls, each grown to the
// largest copy any layer needed; that held ~190 MB of ResNet50 batch-8 memory
// through the whole step, peak included. Allocating per call is cheap because
// the CPU allocator caches large blocks (Note [CPU block cache] in
// core/allocator.h): the same sizes come back every step and fault no pages,
// and between convolutions the blocks serve activations of the same size.
//
// Threads: oneDNN (built with OpenMP) uses ls::get_num_threads() threads and
// sizes its work split when a primitive is built, so the thread count is part
// of the cache key. Primitives are shared by every thread: they are built with
// a user-managed scratchpad (from the call's own ScratchArena), which
// makes concurrent execution safe, and each thread runs them on its own stream.
//
// Read before: core/native/fast/conv_onednn.h, core/native/fast/conv_onednn_run.h.
// Read next: core/native/fast/conv_onednn_passes.cpp.
#include "core/native/fast/conv_onednn.h"

#include <array>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/env_flag.h"
#include "core/error.h"
#include "core/factory.h"
#include "core/native/fast/conv_onednn_layout.h"
#include "core/native/fast/conv_onednn_run.h"
#include "core/native/native.h"
#include "core/parallel.h"
#include "core/profiler.h"

namespace lockstep::native {

// Everything up to the public functions is internal (conv_onednn_run.h declares
// what conv_onednn_passes.cpp uses); Layout, choose_layout and kFewChannels come
// from conv_onednn_layout.h.
namespace onednn_detail {

using Tag = memory::format_tag;

// The cache is cleared when it would grow past this many geometries.
constexpr size_t kMaxCacheEntries = 256;
// Auto runs Winograd on outputs of at least this many pixels (oH oW).
constexpr int64_t kWinogradMinPixels = 14 * 14;


dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

bool has_amx() {
  static const bool amx = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto want = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx);
    return (isa & want) == want;
  }();
  return amx;
}

bool has_bf16() {
  static const bool bf16 = [] {
    if (!env_flag("LOCKSTEP_ONEDNN_BF16", true)) return false;
    using dt = dnnl::memory::data_type;
    const dnnl::memory::desc a({8, 8}, dt::bf16, dnnl::memory::format_tag::ab);
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, a), cpu_engine());
      return true;
    } catch (const dnnl::error&) {
      return false;  // dnnl_unimplemented: no bf16 kernel for this CPU
    }
  }();
  return bf16;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void add_scratchpad(std::unordered_map<int, memory>& args, const memory::desc& desc, Tensor& keep) {
  if (desc.get_size() == 0) return;
  keep = empty({static_cast<int64_t>(desc.get_size())}, kUInt8);
  args.insert({DNNL_ARG_SCRATCHPAD, memory(desc, cpu_engine(), keep.raw_data())});
}

Slot make_slot(int arg, bool output, const memory::desc& plain, const memory::desc& inner) {
  Slot slot;
  slot.arg = arg;
  slot.output = output;
  slot.plain = plain;
  slot.inner = inner;
  if (plain != inner) {
    dnnl::engine& engine = cpu_engine();
    dnnl::reorder::primitive_desc pd = output ? dnnl::reorder::primitive_desc(
                                                    engine, inner, engine, plain, user_scratchpad())
                                              : dnnl::reorder::primitive_desc(
                                                    engine, plain, engine, inner, user_scratchpad());
    slot.convert = dnnl::reorder(pd);
    slot.convert_scratchpad = pd.scratchpad_desc();
  }
  return slot;
}

// The memory descriptors of one convolution: `plain` are ours (NCHW, OIHW or
// GOIHW, bias X); the others are what the primitive is asked for under `layout`.
struct ConvDescs {
  memory::desc src, weights, bias, dst;              // as asked of the primitive
  memory::desc plain_src, plain_weights, plain_dst;  // ours
  memory::dims strides, dilates, padding;
};

ConvDescs make_descs(const ConvGeometry& g, Layout layout, bool bias) {
  const auto f32 = memory::data_type::f32;
  const memory::dims src{g.n, g.c_in, g.h, g.w}, dst{g.n, g.c_out, g.oh, g.ow};
  const bool grouped = g.groups > 1;
  const memory::dims weights = grouped ? memory::dims{g.groups, g.c_out_g(), g.c_in_g(), g.kh, g.kw}
                                       : memory::dims{g.c_out, g.c_in, g.kh, g.kw};
  const Tag weights_tag = grouped ? Tag::goihw : Tag::oihw;
  ConvDescs d;
  d.plain_src = memory::desc(src, f32, Tag::nchw);
  d.plain_weights = memory::desc(weights, f32, weights_tag);
  d.plain_dst = memory::desc(dst, f32, Tag::nchw);
  d.src = memory::desc(src, f32, layout == Layout::Blocked ? Tag::any : Tag::nchw);
  d.weights = memory::desc(weights, f32, layout == Layout::Plain ? weights_tag : Tag::any);
  d.dst = memory::desc(dst, f32, layout == Layout::Plain ? Tag::nchw : Tag::any);
  if (bias) d.bias = memory::desc({g.c_out}, f32, Tag::x);  // else zero: no bias term
  d.strides = {g.stride_h, g.stride_w};
  d.dilates = {g.dil_h - 1, g.dil_w - 1};  // oneDNN counts the gaps: 0 is a dense kernel
  // Symmetric padding gives oneDNN's output size the same floor as ours.
  d.padding = {g.pad_h, g.pad_w};
  return d;
}

std::string geometry_str(const ConvGeometry& g) {
  return lockstep::detail::str("input [", g.n, ", ", g.c_in, ", ", g.h, ", ", g.w, "], weight [",
                               g.c_out, ", ", g.c_in_g(), ", ", g.kh, ", ", g.kw, "], stride ",
                               g.stride_h, "x", g.stride_w, ", padding ", g.pad_h, "x", g.pad_w,
                               ", dilation ", g.dil_h, "x", g.dil_w, ", groups ", g.groups);
}

// The pass's primitive under `layout`, or null when oneDNN has only its
// reference implementation (or none) for it.
std::shared_ptr<CachedConv> try_build(const ConvGeometry& g, ConvPass pass, bool bias,
                                      Layout layout, bool winograd = false) {
  const ConvDescs d = make_descs(g, layout, bias);
  dnnl::engine& engine = cpu_engine();
  const auto alg = winograd ? dnnl::algorithm::convolution_winograd
                            : dnnl::algorithm::convolution_direct;
  auto c = std::make_shared<CachedConv>();
  try {
    // The forward primitive descriptor; the backward passes take it as a hint.
    const bool fwd_bias = bias && pass != ConvPass::BackwardData;
    const dnnl::convolution_forward::desc fwd(
        dnnl::prop_kind::forward_training, alg, d.src, d.weights,
        fwd_bias ? d.bias : memory::desc(), d.dst, d.strides, d.dilates, d.padding, d.padding);
    const dnnl::convolution_forward::primitive_desc fwd_pd(fwd, user_scratchpad(), engine);
    if (pass == ConvPass::Forward) {
      c->primitive = dnnl::convolution_forward(fwd_pd);
      c->scratchpad = fwd_pd.scratchpad_desc();
      c->impl = fwd_pd.impl_info_str();
      c->slots = {make_slot(DNNL_ARG_SRC, false, d.plain_src, fwd_pd.src_desc()),
                  make_slot(DNNL_ARG_WEIGHTS, false, d.plain_weights, fwd_pd.weights_desc())};
      if (bias) c->slots.push_back(make_slot(DNNL_ARG_BIAS, false, d.bias, fwd_pd.bias_desc()));
      c->slots.push_back(make_slot(DNNL_ARG_DST, true, d.plain_dst, fwd_pd.dst_desc()));
    } else if (pass == ConvPass::BackwardData) {
      const dnnl::convolution_backward_data::desc bwd(alg, d.src, d.weights, d.dst, d.strides,
                                                      d.dilates, d.padding, d.padding);
      const dnnl::convolution_backward_data::primitive_desc pd(bwd, user_scratchpad(), engine,
                                                               fwd_pd);
      c->primitive = dnnl::convolution_backward_data(pd);
      c->scratchpad = pd.scratchpad_desc();
      c->impl = pd.impl_info_str();
      c->slots = {make_slot(DNNL_ARG_DIFF_DST, false, d.plain_dst, pd.diff_dst_desc()),
                  make_slot(DNNL_ARG_WEIGHTS, false, d.plain_weights, pd.weights_desc()),
                  make_slot(DNNL_ARG_DIFF_SRC, true, d.plain_src, pd.diff_src_desc())};
    } else {
      const dnnl::convolution_backward_weights::desc bwd(alg, d.src, d.weights, d.bias, d.dst,
                                                         d.strides, d.dilates, d.padding,
                                                         d.padding);
      const dnnl::convolution_backward_weights::primitive_desc pd(bwd, user_scratchpad(), engine,
                                                                  fwd_pd);
      c->primitive = dnnl::convolution_backward_weights(pd);
      c->scratchpad = pd.scratchpad_desc();
      c->impl = pd.impl_info_str();
      c->slots = {make_slot(DNNL_ARG_DIFF_DST, false, d.plain_dst, pd.diff_dst_desc()),
                  make_slot(DNNL_ARG_SRC, false, d.plain_src, pd.src_desc()),
                  make_slot(DNNL_ARG_DIFF_WEIGHTS, true, d.plain_weights,
                            pd.diff_weights_desc())};
      if (bias) {
        c->slots.push_back(make_slot(DNNL_ARG_DIFF_BIAS, true, d.bias, pd.diff_bias_desc()));
      }
    }
  } catch (const dnnl::error& e) {
    // No implementation for this layout plan: decline. Anything else means we
    // described the convolution wrongly, which must not pass silently.
    if (e.status == dnnl_unimplemented) return nullptr;
    throw Error(lockstep::detail::str("conv2d: oneDNN rejected the ", layout_name(layout),
                                      " primitive for ", geometry_str(g), " (", e.what(),
                                      ", status ", static_cast<int>(e.status),
                                      "); this is a lockstep bug, please report it, and use "
                                      "native::set_conv_backend(ConvBackend::Reference)"));
  }
  if (c->impl.rfind("ref", 0) == 0) return nullptr;  // slower than our im2col path
  // oneDNN names its Winograd kernels "jit_wino_...", e.g. "jit_wino_4x3:avx512_core (blocked)".
  c->impl += " (" + std::string(layout_name(layout)) + ")";
  c->label = conv_profile_label(g, pass, c->impl.substr(0, c->impl.find(':')));
  return c;
}

std::shared_ptr<const CachedConv> build_direct(const ConvGeometry& g, ConvPass pass, bool bias) {
  const Layout first = choose_layout(g, pass);
  if (first == Layout::Reference) return nullptr;
  if (auto c = try_build(g, pass, bias, first)) return c;
  if (first != Layout::Plain) return try_build(g, pass, bias, Layout::Plain);
  return nullptr;
}

// The convolutions Winograd may run (Note [Winograd convolutions]); oneDNN
// may still decline one (channel counts, image sizes), and then try_build
// returns null.
bool winograd_eligible(const ConvGeometry& g) {
  return g.kh == 3 && g.kw == 3 && g.stride_h == 1 && g.stride_w == 1 && g.dil_h == 1 &&
         g.dil_w == 1 && g.groups == 1 && g.c_in >= kFewChannels && g.c_out >= kFewChannels;
}

double time_primitive(const CachedConv& c, const ConvGeometry& g);

std::shared_ptr<const CachedConv> build(const ConvGeometry& g, ConvPass pass, bool bias,
                                        ConvWinograd mode) {
  if (mode == ConvWinograd::Off || !winograd_eligible(g)) return build_direct(g, pass, bias);
  if (mode == ConvWinograd::Auto && g.oh * g.ow < kWinogradMinPixels) {
    return build_direct(g, pass, bias);
  }
  std::shared_ptr<const CachedConv> wino = try_build(g, pass, bias, Layout::Blocked, true);
  if (mode != ConvWinograd::Timed && wino) return wino;
  std::shared_ptr<const CachedConv> direct = build_direct(g, pass, bias);
  if (!wino) return direct;
  if (!direct) return wino;
  // Timed: both exist; keep the one that ran faster on this geometry.
  return time_primitive(*wino, g) < time_primitive(*direct, g) ? wino : direct;
}

// ---- the process-wide cache ----

using CacheKey = std::array<int64_t, 18>;

struct Cache {
  std::mutex mutex;
  std::map<CacheKey, std::shared_ptr<const CachedConv>> entries;  // null: falls back
  int64_t built = 0;
};

Cache& cache() {
  static Cache* instance = new Cache();  // never destroyed: threads may outlive statics
  return *instance;
}

// The cached primitive for (g, pass, bias), built on first use; null means
// "use the reference path".
std::shared_ptr<const CachedConv> lookup(const ConvGeometry& g, ConvPass pass, bool bias) {
  const ConvWinograd mode = conv_winograd();
  const CacheKey key{static_cast<int64_t>(pass), bias, get_num_threads(), g.n, g.c_in, g.h, g.w,
                     g.c_out, g.kh, g.kw, g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.dil_h,
                     g.dil_w, g.groups, static_cast<int64_t>(mode)};
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  if (auto it = c.entries.find(key); it != c.entries.end()) return it->second;
  if (c.entries.size() >= kMaxCacheEntries) c.entries.clear();  // callers hold their own refs
  std::shared_ptr<const CachedConv> built = build(g, pass, bias, mode);
  ++c.built;
  c.entries.emplace(key, built);
  return built;
}


// Runs `c` on the caller's buffers, one per slot in slot order.
void run(const CachedConv& c, const std::vector<Arg>& buffers, const ConvGeometry& g,
         const char* op) {
  dnnl::engine& engine = cpu_engine();
  dnnl::stream& stream = thread_stream();
  ScratchArena arena;
  auto scratch = [&](const memory::desc& md) { return arena.get(md.get_size()); };
  profiler::Scope scope(c.label);  // Note [Convolution profile labels]
  guarded(c.impl, g, op, [&] {
    std::unordered_map<int, memory> args;
    std::vector<std::pair<memory, memory>> outputs;  // (primitive's, ours) to reorder back
    for (size_t i = 0; i < c.slots.size(); ++i) {
      const Slot& slot = c.slots[i];
      void* ptr = const_cast<void*>(buffers[i].ptr);
      if (!slot.convert || buffers[i].inner) {
        args.emplace(slot.arg, memory(buffers[i].inner ? slot.inner : slot.plain, engine, ptr));
        continue;
      }
      memory ours(slot.plain, engine, ptr), inner(slot.inner, engine, scratch(slot.inner));
      if (slot.output) {
        outputs.emplace_back(inner, ours);
      } else {
        convert(slot, ours, inner, stream, scratch);
      }
      args.emplace(slot.arg, inner);
    }
    if (c.scratchpad.get_size() > 0) {
      args.emplace(DNNL_ARG_SCRATCHPAD, memory(c.scratchpad, engine, scratch(c.scratchpad)));
    }
    c.primitive.execute(stream, args);
    size_t out = 0;
    for (const Slot& slot : c.slots) {
      if (slot.output && slot.convert) {
        convert(slot, outputs[out].first, outputs[out].second, stream, scratch);
        ++out;
      }
    }
    stream.wait();
  });
}

// Wall-clock seconds of one run of `c`, reorders included, on zero-filled
// buffers of its arguments' sizes: the best of kTimingReps runs after a
// warm-up (Note [Winograd convolutions]).
constexpr int kTimingReps = 2;
double time_primitive(const CachedConv& c, const ConvGeometry& g) {
  std::vector<Tensor> owned;
  std::vector<Arg> buffers;
  for (const Slot& slot : c.slots) {
    const auto floats = static_cast<int64_t>(slot.plain.get_size() / sizeof(float));
    owned.push_back(zeros({floats}, kFloat32));
    buffers.push_back({owned.back().data_ptr<float>()});
  }
  double best = 0;
  for (int rep = 0; rep <= kTimingReps; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    run(c, buffers, g, "conv2d (timing the Winograd choice)");
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep == 1 || (rep > 1 && s < best)) best = s;  // rep 0 is the warm-up
  }
  return best;
}

}  // namespace onednn_detail

using namespace onednn_detail;

std::string conv_profile_label(const ConvGeometry& g, ConvPass pass, std::string_view impl) {
  const char* pass_name = pass == ConvPass::Forward        ? "fwd"
                          : pass == ConvPass::BackwardData ? "bwd-d"
                                                           : "bwd-w";
  return lockstep::detail::str("conv ", pass_name, " ", g.kh, "x", g.kw, "s", g.stride_h, " ",
                               g.c_in, "->", g.c_out, " @", g.oh, "x", g.ow, " b", g.n, " ", impl);
}

ConvOnednnCacheStats conv_onednn_cache_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return {c.built, static_cast<int64_t>(c.entries.size())};
}

bool conv_onednn_has_primitive(const ConvGeometry& g, ConvPass pass, bool bias) {
  return lookup(g, pass, bias) != nullptr;
}

std::string conv_onednn_impl(const ConvGeometry& g, ConvPass pass, bool bias) {
  const auto c = lookup(g, pass, bias);
  return c ? c->impl : "none";
}

}  // namespace lockstep::native
