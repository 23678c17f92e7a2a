// core/native/gemm_bf16.cpp — the bfloat16 GEMM: reference loops and oneDNN's matmul.
//
// oneDNN's matmul takes each matrix as a memory descriptor with explicit strides,
// so a transposed operand is the same buffer described with swapped strides:
// A stored (m, k) row-major has strides {lda, 1}; stored transposed, as (k, m),
// it is read through strides {1, lda}. No operand is copied on our side (the
// primitive may pack tiles internally). beta != 0 is a "sum" post-op, which adds
// beta * C to the product before C is written.
//
// § Note [bf16 weights packed once per step]
// With B plain, oneDNN's AMX matmul copies B into its tile layout inside every
// call (into the scratch memory). When B is a weight (gemm_bf16's weight_b: the
// linear layers and 1x1 convolutions under autocast, forward and input
// gradient), the primitive is built with B in `format_tag::any` and B is
// reordered once into the layout it asks for (pd.weights_desc()); that copy is
// kept, per weight and per (transposition, k, n), and reused while the weight's
// owner (its parameter's storage) is alive and B's pointer and the owner's
// version counter are those it was packed from. The optimizer's step bumps the
// version, so each weight is packed once per step and layout; the forward
// (W read transposed) and the input gradient (W as stored) are two layouts.
// The reference loops ignore weight_b. The packed copies cost 2 bytes per
// weight element and layout, kept for the process: BERT-base's peak RSS grows
// by ~410 MB. Whether it pays at the steps' shapes was not measured yet (the
// one AMX machine a session had was loaded; oneDNN's own figures at BERT's
// shapes show plain and packed B equally fast: docs/results/bf16.md), so
// linear passes its weight only with LOCKSTEP_BF16_PACK_WEIGHTS=1.
// Read before: core/native/gemm_bf16.h.
#include "core/native/gemm_bf16.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/error.h"
#include "core/native/gemm.h"
#include "core/native/native.h"
#include "core/native/fast/onednn_engine.h"
#include "core/parallel.h"
#include "core/profiler.h"

namespace lockstep::native {

namespace {

// Products with at most this many multiply-adds run one per thread in a batch.
constexpr int64_t kSmallBatchedMacs = 64 * 64 * 64;

void check_args(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda,
                int64_t ldb, int64_t ldc) {
  LS_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm_bf16: sizes must be non-negative, got m=", m,
           " n=", n, " k=", k);
  LS_CHECK(lda >= std::max<int64_t>(1, trans_a ? m : k) &&
               ldb >= std::max<int64_t>(1, trans_b ? k : n) && ldc >= std::max<int64_t>(1, n),
           "gemm_bf16: leading dimensions lda=", lda, " ldb=", ldb, " ldc=", ldc,
           " are narrower than the matrices (m=", m, " n=", n, " k=", k, ")");
}

// (trans_a, trans_b, m, n, k, lda, ldb, ldc, C is bf16, beta, with a bias, B packed)
using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, float,
                       bool, bool>;

struct Cached {
  dnnl::matmul primitive;
  dnnl::memory::desc scratchpad;  // see Note [oneDNN scratch memory] in fast/conv_onednn.cpp
  dnnl::memory::desc weights;     // B's layout (the packed one when B is packed)
};

std::mutex g_mutex;
std::map<Key, Cached> g_cache;
std::atomic<int64_t> g_built{0};

dnnl::memory::desc plain_b(bool trans_b, int64_t k, int64_t n, int64_t ldb) {
  return dnnl::memory::desc({k, n}, dnnl::memory::data_type::bf16,
                            trans_b ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1});
}

const Cached& primitive(const Key& key) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_cache.find(key);
  if (it != g_cache.end()) return it->second;
  const auto [ta, tb, m, n, k, lda, ldb, ldc, out_bf16, beta, with_bias, packed] = key;
  using dt = dnnl::memory::data_type;
  const dnnl::memory::desc a_md({m, k}, dt::bf16, ta ? dnnl::memory::dims{1, lda}
                                                     : dnnl::memory::dims{lda, 1});
  const dnnl::memory::desc b_md =
      packed ? dnnl::memory::desc({k, n}, dt::bf16, dnnl::memory::format_tag::any)
             : plain_b(tb, k, n, ldb);
  const dnnl::memory::desc c_md({m, n}, out_bf16 ? dt::bf16 : dt::f32,
                                dnnl::memory::dims{ldc, 1});
  // Our own scratch memory per call: the library's shared one would be used by
  // two threads at once when a batch of products runs in parallel.
  dnnl::primitive_attr attr = onednn_detail::user_scratchpad();
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  // The bias, one bf16 value per column, broadcast over the rows: oneDNN adds it
  // to the float32 sum, before the sum post-op and the one rounding into C.
  const dnnl::memory::desc bias_md = with_bias ? dnnl::memory::desc({1, n}, dt::bf16, dnnl::memory::dims{n, 1})
                                               : dnnl::memory::desc();
  const dnnl::matmul::desc desc(a_md, b_md, bias_md, c_md);
  const dnnl::matmul::primitive_desc pd(desc, attr, onednn_detail::cpu_engine());
  ++g_built;
  return g_cache.emplace(key, Cached{dnnl::matmul(pd), pd.scratchpad_desc(), pd.weights_desc()})
      .first->second;
}

// Note [bf16 weights packed once per step]: one packed copy per (owner, trans_b, k, n).
struct PackedWeight {
  std::weak_ptr<const void> owner;
  const BFloat16* source = nullptr;  // the B it was packed from
  uint64_t version = 0;
  dnnl::memory memory;  // in the primitive's weights_desc()
};
using PackedKey = std::tuple<const void*, bool, int64_t, int64_t>;

std::mutex g_packed_mutex;
std::map<PackedKey, PackedWeight> g_packed;
std::atomic<int64_t> g_packs{0};

// B in `layout`, from the packed copy when it is current, else reordered now.
dnnl::memory packed_b(const Bf16Weight& w, const dnnl::memory::desc& layout, bool trans_b,
                      int64_t k, int64_t n, int64_t ldb, const BFloat16* b) {
  std::lock_guard<std::mutex> lock(g_packed_mutex);
  const PackedKey key{w.owner.get(), trans_b, k, n};
  auto it = g_packed.find(key);
  if (it == g_packed.end()) {
    std::erase_if(g_packed, [](const auto& entry) { return entry.second.owner.expired(); });
    it = g_packed.emplace(key, PackedWeight{}).first;
  }
  PackedWeight& p = it->second;
  // A weak_ptr to a dead owner stays expired even when a new one takes its address.
  const bool same_owner = !p.owner.expired() && p.owner.lock() == w.owner;
  if (same_owner && p.source == b && p.version == w.version && p.memory &&
      p.memory.get_desc() == layout) {
    return p.memory;
  }
  dnnl::engine& engine = onednn_detail::cpu_engine();
  if (!p.memory || p.memory.get_desc() != layout) p.memory = dnnl::memory(layout, engine);
  dnnl::memory source(plain_b(trans_b, k, n, ldb), engine, const_cast<BFloat16*>(b));
  dnnl::stream& stream = onednn_detail::thread_stream();
  dnnl::reorder(source, p.memory).execute(stream, source, p.memory);
  stream.wait();
  p.owner = w.owner;
  p.source = b;
  p.version = w.version;
  ++g_packs;
  return p.memory;
}

template <class Out>
void gemm_onednn(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const BFloat16* a,
                 int64_t lda, const BFloat16* b, int64_t ldb, float beta, Out* c, int64_t ldc,
                 const BFloat16* bias, const Bf16Weight* weight_b) {
  constexpr bool out_bf16 = std::is_same_v<Out, BFloat16>;
  const bool pack = weight_b != nullptr && weight_b->owner != nullptr;
  const Key key{trans_a, trans_b, m, n, k, lda, ldb, ldc, out_bf16, beta, bias != nullptr, pack};
  const Cached& p = primitive(key);
  using dt = dnnl::memory::data_type;
  dnnl::engine& engine = onednn_detail::cpu_engine();
  // Memory objects over our buffers (descriptors as in primitive(); only the handles differ).
  const dnnl::memory a_mem({{m, k}, dt::bf16, trans_a ? dnnl::memory::dims{1, lda}
                                                      : dnnl::memory::dims{lda, 1}},
                           engine, const_cast<BFloat16*>(a));
  const dnnl::memory b_mem = pack ? packed_b(*weight_b, p.weights, trans_b, k, n, ldb, b)
                                  : dnnl::memory(plain_b(trans_b, k, n, ldb), engine,
                                                 const_cast<BFloat16*>(b));
  const dnnl::memory c_mem({{m, n}, out_bf16 ? dt::bf16 : dt::f32, dnnl::memory::dims{ldc, 1}},
                           engine, c);
  dnnl::stream& stream = onednn_detail::thread_stream();
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}};
  if (bias != nullptr) {
    args.insert({DNNL_ARG_BIAS, dnnl::memory({{1, n}, dt::bf16, dnnl::memory::dims{n, 1}}, engine,
                                             const_cast<BFloat16*>(bias))});
  }
  Tensor scratch;
  onednn_detail::add_scratchpad(args, p.scratchpad, scratch);
  p.primitive.execute(stream, args);
  stream.wait();
}

}  // namespace

template <class Out>
void gemm_bf16_reference(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                         const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb,
                         float beta, Out* c, int64_t ldc, const BFloat16* bias) {
  check_args(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  parallel_for(0, m, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, n * k)),
               [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        float sum = 0.0f;
        for (int64_t p = 0; p < k; ++p) {
          const float x = trans_a ? a[p * lda + i] : a[i * lda + p];
          const float y = trans_b ? b[j * ldb + p] : b[p * ldb + j];
          sum += x * y;
        }
        if (bias != nullptr) sum += static_cast<float>(bias[j]);
        Out& out = c[i * ldc + j];
        out = Out(beta == 0.0f ? sum : sum + beta * static_cast<float>(out));
      }
    }
  });
}

template <class Out>
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const BFloat16* a,
               int64_t lda, const BFloat16* b, int64_t ldb, float beta, Out* c, int64_t ldc,
               const BFloat16* bias, const Bf16Weight* weight_b) {
  check_args(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  profiler::mark_gemm();  // Note [Profiler bytes]
  // Note [Kernel dispatch]: choose_gemm (gemm.cpp) names the path.
  const GemmImpl impl =
      choose_gemm(gemm_backend(), kBFloat16, trans_a, trans_b, m, n, k, /*alpha_zero=*/false);
  if (impl == GemmImpl::Nothing) return;
  if (impl == GemmImpl::Bf16Reference) {
    return gemm_bf16_reference(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc, bias);
  }
  if (impl == GemmImpl::Bf16ViaFloat32) {
    return gemm_bf16_via_float32(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc, bias);
  }
  gemm_onednn(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc, bias, weight_b);
}

template <class Out>
void gemm_bf16_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n,
                       int64_t k, const BFloat16* a, const int64_t* a_offsets, int64_t lda,
                       const BFloat16* b, const int64_t* b_offsets, int64_t ldb, float beta,
                       Out* c, const int64_t* c_offsets, int64_t ldc) {
  LS_CHECK(batch >= 0, "gemm_bf16_batched: batch must be non-negative, got ", batch);
  profiler::mark_gemm();  // this thread's scope; workers open none
  check_args(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  const bool small = m * n * k <= kSmallBatchedMacs;
  parallel_for(0, batch, small ? 1 : batch, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      gemm_bf16(trans_a, trans_b, m, n, k, a + a_offsets[i], lda, b + b_offsets[i], ldb, beta,
                c + c_offsets[i], ldc);
    }
  });
}

int64_t gemm_bf16_primitives_built() { return g_built.load(); }
int64_t gemm_bf16_weights_packed() { return g_packs.load(); }

#define LS_INSTANTIATE_GEMM_BF16(Out)                                                          \
  template void gemm_bf16<Out>(bool, bool, int64_t, int64_t, int64_t, const BFloat16*, int64_t, \
                               const BFloat16*, int64_t, float, Out*, int64_t, const BFloat16*, \
                               const Bf16Weight*);                                              \
  template void gemm_bf16_reference<Out>(bool, bool, int64_t, int64_t, int64_t,                 \
                                         const BFloat16*, int64_t, const BFloat16*, int64_t,    \
                                         float, Out*, int64_t, const BFloat16*);                \
  template void gemm_bf16_batched<Out>(int64_t, bool, bool, int64_t, int64_t, int64_t,          \
                                       const BFloat16*, const int64_t*, int64_t,                \
                                       const BFloat16*, const int64_t*, int64_t, float, Out*,   \
                                       const int64_t*, int64_t);
LS_INSTANTIATE_GEMM_BF16(float)
LS_INSTANTIATE_GEMM_BF16(BFloat16)
#undef LS_INSTANTIATE_GEMM_BF16

}  // namespace lockstep::native
