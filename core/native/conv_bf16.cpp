// core/native/conv_bf16.cpp — bfloat16 convolutions: the float32 reference and oneDNN's primitives.
//
// Each pass is one oneDNN primitive built with format_tag::any, so the library
// picks the activation and weight layouts its AMX kernels want (channels-last
// or blocked). Our activations are NCHW or channels-last (Note [Channels-last
// activations] in memory_format.h), weights OIHW; an operand is reordered into
// the primitive's layout only when the two differ, and an output back. With
// channels-last activations in and out, the AMX primitives here (brgconv, which
// picks NHWC) run with no reorder at all. A reorder also converts: the backward-data output lands directly in the
// input's dtype, the weight gradient comes out of the primitive in float32.
// Read before: core/native/conv_bf16.h.
#include "core/native/conv_bf16.h"

#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/env_flag.h"
#include "core/native/conv_dispatch.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/native/fast/onednn_engine.h"
#include "core/native/fast/transpose_tiles.h"
#include "core/parallel.h"
#include "core/profiler.h"

namespace lockstep::native {

namespace {

using dnnl::memory;
using dt = memory::data_type;
using onednn_detail::cpu_engine;
using onednn_detail::thread_stream;

// Every primitive and reorder here takes its scratch memory from us, per call
// (Note [oneDNN scratch memory] in fast/conv_onednn.cpp): two threads never share one.
using onednn_detail::add_scratchpad;
using onednn_detail::user_scratchpad;

// Whether `d` is a plain 4-d layout `tag` of bf16 elements.
bool is_bf16_layout(const memory::desc& d, memory::format_tag tag) {
  return d.data_type() == dt::bf16 && d.dims().size() == 4 &&
         d == memory::desc(d.dims(), dt::bf16, tag);
}

// dst = src for bf16 NCHW <-> NHWC (the layout oneDNN's AMX kernels take for
// these layers), image by image as a (C, H W) <-> (H W, C) transpose in
// registers (Note [Transposing in registers]): faster than oneDNN's jit:uni
// reorder (docs/results/kernel_choices.md). False for any other pair.
bool reorder_channels_last(const memory& src, const memory& dst) {
  const memory::desc sd = src.get_desc(), dd = dst.get_desc();
  if (sd.dims() != dd.dims()) return false;
  const bool to_nhwc = is_bf16_layout(sd, memory::format_tag::nchw) &&
                       is_bf16_layout(dd, memory::format_tag::nhwc);
  const bool to_nchw = is_bf16_layout(sd, memory::format_tag::nhwc) &&
                       is_bf16_layout(dd, memory::format_tag::nchw);
  if (!to_nhwc && !to_nchw) return false;
  if (!detail::transpose_block_available(sizeof(BFloat16))) return false;
  const memory::dims dims = sd.dims();
  const int64_t n = dims[0], c = dims[1], hw = dims[2] * dims[3];
  const auto* s = static_cast<const BFloat16*>(src.get_data_handle());
  auto* d = static_cast<BFloat16*>(dst.get_data_handle());
  parallel_for(0, n, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const BFloat16* si = s + i * c * hw;
      BFloat16* di = d + i * c * hw;
      if (to_nhwc) {
        detail::transpose_block(si, hw, di, c, hw, c, sizeof(BFloat16));  // d[p][ch] = s[ch][p]
      } else {
        detail::transpose_block(si, c, di, hw, c, hw, sizeof(BFloat16));  // d[ch][p] = s[p][ch]
      }
    }
  });
  return true;
}

// dst = src in dst's layout and type, one oneDNN reorder.
void reorder(const memory& src, const memory& dst) {
  profiler::Scope prof("conv2d_bf16.reorder");
  if (reorder_channels_last(src, dst)) return;
  const dnnl::reorder::primitive_desc pd(src, dst, user_scratchpad());
  std::unordered_map<int, memory> args{{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
  Tensor scratch;
  add_scratchpad(args, pd.scratchpad_desc(), scratch);
  dnnl::reorder(pd).execute(thread_stream(), args);
}

IntList stride_of(const ConvGeometry& g) { return {g.stride_h, g.stride_w}; }
IntList padding_of(const ConvGeometry& g) { return {g.pad_h, g.pad_w}; }
IntList dilation_of(const ConvGeometry& g) { return {g.dil_h, g.dil_w}; }

// ---- oneDNN descriptors of a geometry ----

memory::dims src_dims(const ConvGeometry& g) { return {g.n, g.c_in, g.h, g.w}; }
memory::dims dst_dims(const ConvGeometry& g) { return {g.n, g.c_out, g.oh, g.ow}; }
memory::dims weight_dims(const ConvGeometry& g) {
  if (g.groups == 1) return {g.c_out, g.c_in, g.kh, g.kw};
  return {g.groups, g.c_out_g(), g.c_in_g(), g.kh, g.kw};
}
memory::format_tag weight_tag(const ConvGeometry& g) {
  return g.groups == 1 ? memory::format_tag::oihw : memory::format_tag::goihw;
}
memory::desc any(const memory::dims& dims, dt type) {
  return memory::desc(dims, type, memory::format_tag::any);
}

// The right padding that makes oneDNN's output size equal ours (PyTorch's floor rule).
memory::dims padding_r(const ConvGeometry& g) {
  return {(g.oh - 1) * g.stride_h + (g.kh - 1) * g.dil_h + 1 - g.h - g.pad_h,
          (g.ow - 1) * g.stride_w + (g.kw - 1) * g.dil_w + 1 - g.w - g.pad_w};
}

struct Primitives {
  dnnl::convolution_forward::primitive_desc fwd;
  dnnl::convolution_backward_data::primitive_desc bwd_data;
  dnnl::convolution_backward_weights::primitive_desc bwd_weights;
  dnnl::convolution_forward fwd_p;
  dnnl::convolution_backward_data bwd_data_p;
  dnnl::convolution_backward_weights bwd_weights_p;
};

using Key = std::vector<int64_t>;

Key key_of(const ConvGeometry& g, bool bias) {
  // oH, oW too: they fix the right padding, which the other fields do not when a
  // caller chooses the output size (the input-gradient phases of conv_bf16_input_grad.cpp).
  return {g.n, g.c_in, g.h, g.w, g.c_out, g.kh, g.kw, g.stride_h, g.stride_w, g.pad_h,
          g.pad_w, g.dil_h, g.dil_w, g.groups, g.oh, g.ow, bias ? 1 : 0};
}

const Primitives& primitives(const ConvGeometry& g, bool bias) {
  static std::mutex mutex;
  static std::map<Key, std::unique_ptr<Primitives>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<Primitives>& slot = cache[key_of(g, bias)];
  if (slot) return *slot;
  dnnl::engine& engine = cpu_engine();
  const memory::desc src = any(src_dims(g), dt::bf16), dst = any(dst_dims(g), dt::bf16);
  const memory::desc wts = any(weight_dims(g), dt::bf16);
  const memory::desc bias_md = bias ? memory::desc({g.c_out}, dt::f32, memory::format_tag::x)
                                    : memory::desc();
  const memory::dims strides{g.stride_h, g.stride_w}, dil{g.dil_h - 1, g.dil_w - 1};
  const memory::dims pad_l{g.pad_h, g.pad_w}, pad_r = padding_r(g);
  const auto alg = dnnl::algorithm::convolution_direct;
  const dnnl::primitive_attr attr = user_scratchpad();
  dnnl::convolution_forward::primitive_desc fwd(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, src, wts, bias_md,
                                      dst, strides, dil, pad_l, pad_r),
      attr, engine);
  dnnl::convolution_backward_data::primitive_desc bwd_data(
      dnnl::convolution_backward_data::desc(alg, src, wts, dst, strides, dil, pad_l, pad_r),
      attr, engine, fwd);
  // The weight gradient in float32 (it goes to a float32 master weight).
  const memory::desc gw = any(weight_dims(g), dt::f32);
  const memory::desc gb = memory::desc({g.c_out}, dt::f32, memory::format_tag::x);
  dnnl::convolution_backward_weights::primitive_desc bwd_weights(
      dnnl::convolution_backward_weights::desc(alg, src, gw, gb, dst, strides, dil, pad_l, pad_r),
      attr, engine, fwd);
  slot = std::make_unique<Primitives>(Primitives{fwd, bwd_data, bwd_weights,
                                                 dnnl::convolution_forward(fwd),
                                                 dnnl::convolution_backward_data(bwd_data),
                                                 dnnl::convolution_backward_weights(bwd_weights)});
  return *slot;
}

// A memory object over a plain tensor (NCHW activations, OIHW / GOIHW weights).
memory plain_memory(const Tensor& t, const memory::dims& dims, memory::format_tag tag) {
  const dt type = t.dtype() == kBFloat16 ? dt::bf16 : dt::f32;
  return memory(memory::desc(dims, type, tag), cpu_engine(), t.raw_data());
}


// An activation as oneDNN memory: a channels-last t in place (tag nhwc), any
// other made contiguous (tag nchw) into `keep`, which must outlive the memory.
memory activation_memory(const Tensor& t, const memory::dims& dims, Tensor& keep) {
  keep = stored_channels_last(t) ? t : contiguous(t);
  return plain_memory(keep, dims, stored_channels_last(t) ? memory::format_tag::nhwc
                                                          : memory::format_tag::nchw);
}

// A (C_out, C_in, kH, kW) weight as oneDNN memory: contiguous (tag oihw), or the
// transpose of a contiguous (C_in, C_out, kH, kW) tensor read in place (tag iohw:
// the input-gradient phases of fast/conv_bf16_input_grad.cpp hand such a view, and
// the reorder into the primitive's layout transposes it for free); any other made
// contiguous into `keep`, which must outlive the memory.
memory weight_memory(const Tensor& w, const ConvGeometry& g, Tensor& keep) {
  if (g.groups == 1 && !w.is_contiguous() && permute(w, {1, 0, 2, 3}).is_contiguous()) {
    keep = w;
    return memory(memory::desc(weight_dims(g), dt::bf16, memory::format_tag::iohw), cpu_engine(),
                  keep.raw_data());
  }
  keep = contiguous(w);
  return plain_memory(keep, weight_dims(g), weight_tag(g));
}

// A new (N, C, H, W) activation, channels-last or NCHW.
Tensor new_activation(const IntList& sizes, ScalarType dtype, bool channels_last_order) {
  return channels_last_order ? empty_channels_last(sizes, dtype) : empty(sizes, dtype);
}

// t as `dtype` in the order asked for (channels-last or NCHW), in one copy: copy_
// converts and transposes in the same pass (Note [Copy loops] in copy_kernels.h),
// where to_dtype then a relayout would make two. t itself when it already is.
Tensor converted(const Tensor& t, ScalarType dtype, bool channels_last_order) {
  const bool in_order = channels_last_order ? is_channels_last(t) : t.is_contiguous();
  if (t.dtype() == dtype && in_order) return t;
  Tensor out = new_activation(t.sizes(), dtype, channels_last_order);
  copy_(out, t);
  return out;
}

// `m` in layout `want`: m itself, or a reordered copy in `keep` (a byte tensor
// that must live until the primitive has run).
memory as_layout(memory m, const memory::desc& want, Tensor& keep) {
  if (m.get_desc() == want) return m;
  keep = empty({static_cast<int64_t>(want.get_size())}, kUInt8);
  memory out(want, cpu_engine(), keep.raw_data());
  reorder(m, out);
  return out;
}

// Runs primitive `p` (its descriptor `pd`) writing its output `arg`, of layout
// `produced`, into the plain `target`.
template <class PrimitiveDesc>
void run_into(const dnnl::primitive& p, const PrimitiveDesc& pd, std::unordered_map<int, memory> args,
              int arg, const memory::desc& produced, memory target) {
  dnnl::stream& stream = thread_stream();
  Tensor scratchpad;
  add_scratchpad(args, pd.scratchpad_desc(), scratchpad);
  if (produced == target.get_desc()) {
    args.insert({arg, target});
    p.execute(stream, args);
    return;
  }
  Tensor scratch = empty({static_cast<int64_t>(produced.get_size())}, kUInt8);
  memory out(produced, cpu_engine(), scratch.raw_data());
  args.insert({arg, out});
  p.execute(stream, args);
  reorder(out, target);
}

void check_bf16(const Tensor& t, const char* what) {
  LS_CHECK(t.dtype() == kBFloat16, "conv2d_bf16: ", what, " must be bfloat16 but is ",
           dtype_name(t.dtype()), "; convert with .to(ls::kBFloat16)");
}

}  // namespace

bool conv_bf16_channels_last() {
  static const bool enabled = env_flag("LOCKSTEP_BF16_CHANNELS_LAST", true);
  return enabled;
}

bool conv_bf16_returns_channels_last(const ConvGeometry& g, const Tensor& x) {
  return conv_bf16_channels_last() && (stored_channels_last(x) || g.c_in <= kImageChannels);
}

bool conv_bf16_can_sum_into(const ConvGeometry& g, const Tensor& gy, const Tensor& sum,
                            ScalarType gx_dtype) {
  // The 1x1 GEMM path's condition (conv_dispatch.cpp), the only one that sums into.
  return conv_bf16_runs_pointwise_gemm(g) &&
         g.stride_h == 1 && g.stride_w == 1 && stored_channels_last(gy) && sum.defined() &&
         sum.device().is_cpu() && sum.dtype() == gx_dtype &&
         (gx_dtype == kBFloat16 || gx_dtype == kFloat32) &&
         sum.sizes() == IntList{g.n, g.c_in, g.h, g.w} && is_channels_last(sum);
}

Tensor conv2d_bf16_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                           const Tensor& bias, ConvBf16SavedInput* saved) {
  profiler::mark_gemm();  // Note [Profiler bytes]
  LS_CHECK(x.dtype() == kBFloat16 || x.dtype() == kFloat32, "conv2d_bf16: the input must be "
           "bfloat16 or float32 but is ", dtype_name(x.dtype()));
  check_bf16(w, "the weight");
  LS_CHECK(!bias.defined() || bias.dtype() == kFloat32, "conv2d_bf16: the bias must be float32 "
           "but is ", dtype_name(bias.dtype()));
  // Each path as choose_conv_bf16 names it (conv_dispatch.cpp).
  const ConvImpl impl = choose_conv_bf16(g, ConvPass::Forward);
  if (impl == ConvImpl::Bf16ViaFloat32) {
    const Tensor x16 = to_dtype(x, kBFloat16);  // x itself when it is bf16
    if (saved != nullptr) *saved = ConvBf16SavedInput{Tensor(), x16, false, x16.is_same(x)};
    // NCHW float32 operands: the float32 convolution's own order.
    const Tensor y = conv2d_forward(converted(x16, kFloat32, false), to_dtype(w, kFloat32), bias,
                                    stride_of(g), padding_of(g), dilation_of(g), g.groups);
    // conv2d_forward pads both sides alike: a geometry padded unevenly (the phases of
    // conv_bf16_input_grad.cpp) is oneDNN's alone.
    LS_CHECK(y.size(2) == g.oh && y.size(3) == g.ow, "conv2d_bf16: the float32 path gives a ",
             y.size(2), "x", y.size(3), " output but the geometry asks for ", g.oh, "x", g.ow,
             " (padded unevenly), which only oneDNN's bf16 primitive computes");
    // In the order the fast paths return (conv_bf16.h), which the layers after rely on.
    return converted(y, kBFloat16, conv_bf16_returns_channels_last(g, x));
  }
  if (impl == ConvImpl::Bf16Gemm1x1) return conv2d_bf16_pointwise_forward(g, x, w, bias, saved);
  if (impl == ConvImpl::Bf16Direct) return conv2d_bf16_direct_forward(g, x, w, bias, saved);
  const Primitives& p = primitives(g, bias.defined());
  Tensor y = new_activation({g.n, g.c_out, g.oh, g.ow}, kBFloat16, conv_bf16_returns_channels_last(g, x));
  Tensor xc, keep_x, keep_w;
  // One reorder converts and relayouts (float32 NCHW -> bf16 in the primitive's
  // layout); none when x is bf16 in that layout already.
  const memory src = as_layout(activation_memory(x, src_dims(g), xc), p.fwd.src_desc(), keep_x);
  if (saved != nullptr) {
    // keep_x is undefined only when x already was bf16 in the primitive's layout.
    *saved = keep_x.defined() ? ConvBf16SavedInput{keep_x, Tensor()}
                              : ConvBf16SavedInput{Tensor(), xc, false, xc.is_same(x)};
  }
  Tensor w_plain;
  const memory wts = as_layout(weight_memory(w, g, w_plain), p.fwd.weights_desc(), keep_w);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wts}};
  const Tensor bc = bias.defined() ? contiguous(bias) : Tensor();
  if (bias.defined()) {
    args.insert({DNNL_ARG_BIAS, memory(p.fwd.bias_desc(), cpu_engine(), bc.raw_data())});
  }
  profiler::Scope prof("conv2d_bf16.forward");
  Tensor y_keep;
  run_into(p.fwd_p, p.fwd, args, DNNL_ARG_DST, p.fwd.dst_desc(),
           activation_memory(y, dst_dims(g), y_keep));
  return y;
}

std::tuple<Tensor, Tensor, Tensor> conv2d_bf16_backward(const ConvGeometry& g, const Tensor& gy,
                                                        const ConvBf16SavedInput& x,
                                                        const Tensor& w, ScalarType gx_dtype,
                                                        bool need_input, bool need_weight,
                                                        bool need_bias, const Tensor& sum_into) {
  profiler::mark_gemm();
  LS_CHECK(!sum_into.defined() || (need_input && conv_bf16_can_sum_into(g, gy, sum_into, gx_dtype)),
           "conv2d_bf16_backward: sum_into is given but this layer cannot add its input gradient "
           "into it (check conv_bf16_can_sum_into first)");
  LS_CHECK(gx_dtype == kFloat32 || gx_dtype == kBFloat16, "conv2d_bf16_backward: the input "
           "gradient's dtype must be float32 or bfloat16 but is ", dtype_name(gx_dtype));
  const bool need_x = need_weight || need_bias;
  LS_CHECK(!need_x || x.bytes.defined() || x.plain.defined(), "conv2d_bf16_backward: the weight "
           "gradient needs the saved input, which is empty");
  const Tensor g_y = to_dtype(gy, kBFloat16);  // (N, C_out, oH, oW), NCHW or channels-last
  if (!need_input && !need_x) return {Tensor(), Tensor(), Tensor()};
  // Each pass as choose_conv_bf16 names it (conv_dispatch.cpp); its first three
  // rules (via float32, 1x1 GEMM, direct) name one path for both passes.
  const ConvImpl data = need_input ? choose_conv_bf16(g, ConvPass::BackwardData, g_y, gx_dtype)
                                   : ConvImpl::Bf16OneDNN;
  const ConvImpl weights =
      need_x ? choose_conv_bf16(g, ConvPass::BackwardWeights) : ConvImpl::Bf16OneDNN;
  const ConvImpl whole = need_input ? data : weights;
  if (whole == ConvImpl::Bf16ViaFloat32) {
    LS_CHECK(!need_x || (x.plain.defined() && !x.subsampled), "conv2d_bf16_backward: the "
             "reference path needs the whole saved input (this one was saved by a fast path)");
    // The caller passes no weight without the input gradient, nor the input without
    // the weight's (the autocast node keeps neither then): the float32 backward reads
    // only their shapes then, so uninitialised tensors of those shapes stand in.
    const Tensor w32 = w.defined() ? to_dtype(w, kFloat32)
                                   : empty({g.c_out, g.c_in_g(), g.kh, g.kw}, kFloat32);
    const Tensor x32 = need_x ? converted(x.plain, kFloat32, false)
                              : empty({g.n, g.c_in, g.h, g.w}, kFloat32);
    auto [gx32, gw32, gb32] =
        conv2d_backward(converted(g_y, kFloat32, false), x32, w32, stride_of(g), padding_of(g),
                        dilation_of(g), g.groups, need_input, need_weight, need_bias);
    if (!need_input) return {Tensor(), gw32, gb32};
    return {converted(gx32, gx_dtype, stored_channels_last(g_y)), gw32, gb32};  // dx in dy's order
  }
  if (whole == ConvImpl::Bf16Gemm1x1) {
    LS_CHECK(!need_x || x.plain.defined(), "conv2d_bf16_backward: the 1x1 path needs a plain "
             "saved input (this one was saved by a oneDNN convolution)");
    return conv2d_bf16_pointwise_backward(g, g_y, x, w, gx_dtype, need_input, need_weight,
                                          need_bias, sum_into);
  }
  if (whole == ConvImpl::Bf16Direct) {
    return conv2d_bf16_direct_backward(g, g_y, x, w, gx_dtype, need_input, need_weight,
                                       need_bias);
  }
  const Primitives& p = primitives(g, /*bias=*/false);  // its backward-weights always has a bias
  Tensor gy_user, keep_gy, keep_w, keep_x, gx, gw, gb;
  const memory gy_plain = activation_memory(g_y, dst_dims(g), gy_user);
  // gy in the layout of the first pass that reads it; the second reuses it when it
  // reads the same layout (the usual case), so gy is reordered once.
  memory gy_mem = gy_plain;
  auto gy_in = [&](const memory::desc& want) -> memory {
    if (gy_mem.get_desc() != want) gy_mem = as_layout(gy_plain, want, keep_gy);
    return gy_mem;
  };
  if (need_input && data == ConvImpl::Bf16InputGradAsForward) {
    check_bf16(w, "the weight");
    gx = conv2d_bf16_input_grad_as_forward(g, g_y, w);
  } else if (need_input) {
    check_bf16(w, "the weight");
    const Tensor wc = contiguous(w);
    gx = new_activation({g.n, g.c_in, g.h, g.w}, gx_dtype, stored_channels_last(g_y));
    Tensor gx_keep;
    const memory diff_dst = gy_in(p.bwd_data.diff_dst_desc());
    const memory wts = as_layout(plain_memory(wc, weight_dims(g), weight_tag(g)),
                                 p.bwd_data.weights_desc(), keep_w);
    profiler::Scope prof("conv2d_bf16.backward_data");
    run_into(p.bwd_data_p, p.bwd_data,
             std::unordered_map<int, memory>{{DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_WEIGHTS, wts}},
             DNNL_ARG_DIFF_SRC, p.bwd_data.diff_src_desc(), activation_memory(gx, src_dims(g), gx_keep));
  }
  if (need_x && weights == ConvImpl::Bf16WeightGradGemm) {  // Note [bf16 backward-weights as one GEMM]
    // Both operands in the order the convolutions return (the GEMM takes either).
    const bool cl = stored_channels_last(g_y);
    const auto in_order = [cl](const Tensor& t) { return cl ? channels_last(t) : contiguous(t); };
    Tensor x_plain = x.plain.defined() ? in_order(x.plain) : Tensor();
    if (!x_plain.defined()) {  // the forward's copy, in its primitive's layout
      x_plain = new_activation({g.n, g.c_in, g.h, g.w}, kBFloat16, cl);
      reorder(memory(p.fwd.src_desc(), cpu_engine(), x.bytes.raw_data()),
              plain_memory(x_plain, src_dims(g),
                           cl ? memory::format_tag::nhwc : memory::format_tag::nchw));
    }
    gw = conv2d_bf16_weight_grad_gemm(g, in_order(g_y), x_plain, need_bias ? &gb : nullptr);
    if (!need_weight) gw = Tensor();
  } else if (need_x) {
    gw = empty({g.c_out, g.c_in_g(), g.kh, g.kw}, kFloat32);
    gb = empty({g.c_out}, kFloat32);
    const memory diff_dst = gy_in(p.bwd_weights.diff_dst_desc());
    Tensor x_plain;
    const memory saved = x.bytes.defined()
                             ? memory(p.fwd.src_desc(), cpu_engine(), x.bytes.raw_data())
                             : activation_memory(x.plain, src_dims(g), x_plain);
    const memory src = as_layout(saved, p.bwd_weights.src_desc(), keep_x);
    std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_SRC, src}};
    args.insert({DNNL_ARG_DIFF_BIAS, memory(p.bwd_weights.diff_bias_desc(), cpu_engine(),
                                            gb.raw_data())});
    profiler::Scope prof("conv2d_bf16.backward_weights");
    run_into(p.bwd_weights_p, p.bwd_weights, args, DNNL_ARG_DIFF_WEIGHTS,
             p.bwd_weights.diff_weights_desc(), plain_memory(gw, weight_dims(g), weight_tag(g)));
    if (!need_weight) gw = Tensor();
    if (!need_bias) gb = Tensor();
  }
  return {gx, gw, gb};
}

std::string conv2d_bf16_impl(const ConvGeometry& g) {
  // Note [bf16 without oneDNN kernels] (gemm_bf16_via_float32.cpp): no bf16 primitive here.
  if (!onednn_detail::has_bf16()) return "none (no oneDNN bf16 kernels on this CPU)";
  return primitives(g, false).fwd.impl_info_str();
}

}  // namespace lockstep::native
