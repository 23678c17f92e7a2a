// core/native/gemm_bf16_batched.cpp — a strided batch of bfloat16 products as one
// oneDNN matmul call (Note [bf16 batched matmul as one call] in gemm_bf16.h), and
// its definition in loops.
//
// The batch dims are first simplified, without changing which elements are read:
// dims of size 1 are dropped, and two neighbouring dims merge into one when every
// operand steps along the outer one exactly as far as along the whole inner one
// (a contiguous (B, H) batch becomes one dim of B*H). What is left becomes the
// leading dims of oneDNN's memory descriptors, (batch..., rows, cols): a broadcast
// operand (stride 0) has size 1 there, which oneDNN's matmul broadcasts; the
// matrix dims carry the leading dimension and the transposition as strides, as in
// gemm_bf16.cpp. A batch with more dims than oneDNN takes (12 in all, rare after
// merging) runs one gemm_bf16 per product instead.
//
// Read before: core/native/gemm_bf16.h, core/native/gemm_bf16.cpp.
// Read next: core/native/linalg.cpp.
#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <type_traits>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/error.h"
#include "core/native/fast/onednn_engine.h"
#include "core/native/gemm.h"
#include "core/native/gemm_bf16.h"
#include "core/native/native.h"
#include "core/parallel.h"
#include "core/profiler.h"
#include "core/shape.h"
#include "core/tensor_impl.h"

namespace lockstep::native {

namespace {

void check_batch(const Bf16Batch& batch, int64_t m, int64_t n, int64_t k, bool trans_a,
                 bool trans_b, int64_t lda, int64_t ldb) {
  LS_CHECK(batch.a_strides.size() == batch.sizes.size() &&
               batch.b_strides.size() == batch.sizes.size(),
           "gemm_bf16_strided_batched: ", batch.sizes.size(), " batch dims but ",
           batch.a_strides.size(), " strides of A and ", batch.b_strides.size(), " of B");
  for (int64_t s : batch.sizes) {
    LS_CHECK(s >= 0, "gemm_bf16_strided_batched: batch sizes must be non-negative, got ", s);
  }
  LS_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm_bf16_strided_batched: sizes must be non-negative, "
           "got m=", m, " n=", n, " k=", k);
  LS_CHECK(lda >= std::max<int64_t>(1, trans_a ? m : k) &&
               ldb >= std::max<int64_t>(1, trans_b ? k : n),
           "gemm_bf16_strided_batched: leading dimensions lda=", lda, " ldb=", ldb,
           " are narrower than the matrices (m=", m, " n=", n, " k=", k, ")");
}

// Element offsets of every product's A, B and C (C dense), in row-major order.
template <class F>
void for_each_product(const Bf16Batch& batch, int64_t m, int64_t n, F&& fn) {
  const IntList c_strides = contiguous_strides(batch.sizes);
  const IntList strides[3] = {batch.a_strides, batch.b_strides, c_strides};
  for_each_offset(batch.sizes, strides, [&](const int64_t* off) { fn(off[0], off[1], off[2] * m * n); });
}

// The batch after dropping size-1 dims and merging neighbours (see the file's header).
struct Dims {
  IntList sizes, a, b, c;  // c: C's strides in units of one (m, n) matrix
};

Dims simplify(const Bf16Batch& batch) {
  const IntList c_strides = contiguous_strides(batch.sizes);
  Dims d;
  for (size_t i = 0; i < batch.sizes.size(); ++i) {
    if (batch.sizes[i] == 1) continue;
    const int64_t size = batch.sizes[i], sa = batch.a_strides[i], sb = batch.b_strides[i],
                  sc = c_strides[i];
    if (!d.sizes.empty() && d.a.back() == sa * size && d.b.back() == sb * size &&
        d.c.back() == sc * size) {
      d.sizes.back() *= size;
      d.a.back() = sa;
      d.b.back() = sb;
      d.c.back() = sc;
      continue;
    }
    d.sizes.push_back(size);
    d.a.push_back(sa);
    d.b.push_back(sb);
    d.c.push_back(sc);
  }
  return d;
}

// One operand's descriptor: (batch..., rows, cols), the matrix read with leading
// dimension `ld` (transposed: column-major). A stride-0 batch dim is size 1, its
// stride that of a dense batch (oneDNN matches its kernels' layouts by strides).
dnnl::memory::desc operand_desc(const Dims& d, const IntList& batch_strides, int64_t rows,
                                int64_t cols, bool trans, int64_t ld, dnnl::memory::data_type dt) {
  const size_t r = d.sizes.size();
  dnnl::memory::dims sizes(r + 2), strides(r + 2);
  sizes[r] = rows;
  sizes[r + 1] = cols;
  strides[r] = trans ? 1 : ld;
  strides[r + 1] = trans ? ld : 1;
  int64_t dense = rows * cols;
  for (size_t i = r; i-- > 0;) {
    const bool broadcast = batch_strides[i] == 0;
    sizes[i] = broadcast ? 1 : d.sizes[i];
    strides[i] = broadcast ? dense : batch_strides[i];
    dense = strides[i] * sizes[i];
  }
  return dnnl::memory::desc(sizes, dt, strides);
}

struct Cached {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c, scratchpad;
};

std::mutex g_mutex;
std::map<IntList, Cached> g_cache;  // key: every argument that shapes the primitive
std::atomic<int64_t> g_built{0};

const Cached& primitive(const Dims& d, bool trans_a, bool trans_b, int64_t m, int64_t n,
                        int64_t k, int64_t lda, int64_t ldb, bool out_bf16) {
  IntList key{trans_a, trans_b, m, n, k, lda, ldb, out_bf16};
  for (const IntList* v : {&d.sizes, &d.a, &d.b}) key.insert(key.end(), v->begin(), v->end());
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_cache.find(key);
  if (it != g_cache.end()) return it->second;
  using dt = dnnl::memory::data_type;
  const dnnl::memory::desc a = operand_desc(d, d.a, m, k, trans_a, lda, dt::bf16);
  const dnnl::memory::desc b = operand_desc(d, d.b, k, n, trans_b, ldb, dt::bf16);
  IntList c_elems(d.c.size());
  for (size_t i = 0; i < d.c.size(); ++i) c_elems[i] = d.c[i] * m * n;
  const dnnl::memory::desc c = operand_desc(d, c_elems, m, n, false, n, out_bf16 ? dt::bf16 : dt::f32);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), onednn_detail::user_scratchpad(),
                                        onednn_detail::cpu_engine());
  ++g_built;
  return g_cache.emplace(key, Cached{dnnl::matmul(pd), a, b, c, pd.scratchpad_desc()})
      .first->second;
}

template <class Out>
void run_onednn(const Dims& d, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb, Out* c) {
  const Cached& p = primitive(d, trans_a, trans_b, m, n, k, lda, ldb, std::is_same_v<Out, BFloat16>);
  dnnl::engine& engine = onednn_detail::cpu_engine();
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(p.a, engine, const_cast<BFloat16*>(a))},
      {DNNL_ARG_WEIGHTS, dnnl::memory(p.b, engine, const_cast<BFloat16*>(b))},
      {DNNL_ARG_DST, dnnl::memory(p.c, engine, c)}};
  Tensor scratch;
  onednn_detail::add_scratchpad(args, p.scratchpad, scratch);
  dnnl::stream& stream = onednn_detail::thread_stream();
  p.primitive.execute(stream, args);
  stream.wait();
}

}  // namespace

template <class Out>
void gemm_bf16_strided_batched_reference(const Bf16Batch& batch, bool trans_a, bool trans_b,
                                         int64_t m, int64_t n, int64_t k, const BFloat16* a,
                                         int64_t lda, const BFloat16* b, int64_t ldb, Out* c) {
  check_batch(batch, m, n, k, trans_a, trans_b, lda, ldb);
  for_each_product(batch, m, n, [&](int64_t a_off, int64_t b_off, int64_t c_off) {
    gemm_bf16_reference(trans_a, trans_b, m, n, k, a + a_off, lda, b + b_off, ldb, 0.0f,
                        c + c_off, n);
  });
}

template <class Out>
void gemm_bf16_strided_batched(const Bf16Batch& batch, bool trans_a, bool trans_b, int64_t m,
                               int64_t n, int64_t k, const BFloat16* a, int64_t lda,
                               const BFloat16* b, int64_t ldb, Out* c) {
  check_batch(batch, m, n, k, trans_a, trans_b, lda, ldb);
  profiler::mark_gemm();  // Note [Profiler bytes]
  const Dims d = simplify(batch);
  // Note [Kernel dispatch]: choose_gemm (gemm.cpp) names the path of each product.
  const GemmImpl impl =
      choose_gemm(gemm_backend(), kBFloat16, trans_a, trans_b, m, n, k, /*alpha_zero=*/false);
  const bool empty_batch = std::find(d.sizes.begin(), d.sizes.end(), 0) != d.sizes.end();
  if (impl == GemmImpl::Nothing || empty_batch) return;
  if (impl == GemmImpl::Bf16OneDNN && d.sizes.size() + 2 <= DNNL_MAX_NDIMS) {
    return run_onednn(d, trans_a, trans_b, m, n, k, a, lda, b, ldb, c);
  }
  // The Reference backend (or k == 0), no oneDNN bf16 kernels (Note [bf16 without oneDNN
  // kernels]), or too many dims for one call: product by product, the threads
  // taking whole products (attention's are small: 96 of 128 x 64 x 128 in BERT-base).
  std::vector<std::array<int64_t, 3>> offsets;  // A's, B's and C's of each product
  for_each_product(batch, m, n, [&](int64_t a_off, int64_t b_off, int64_t c_off) {
    offsets.push_back({a_off, b_off, c_off});
  });
  parallel_for(0, static_cast<int64_t>(offsets.size()), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const auto& [a_off, b_off, c_off] = offsets[static_cast<size_t>(i)];
      gemm_bf16(trans_a, trans_b, m, n, k, a + a_off, lda, b + b_off, ldb, 0.0f, c + c_off, n);
    }
  });
}

bool gemm_bf16_batched_wants_dense() {
  return choose_gemm(gemm_backend(), kBFloat16, false, false, 1, 1, 1, /*alpha_zero=*/false) ==
         GemmImpl::Bf16OneDNN;
}

int64_t gemm_bf16_batched_primitives_built() { return g_built.load(); }

#define LS_INSTANTIATE_STRIDED_BATCHED(Out)                                                    \
  template void gemm_bf16_strided_batched<Out>(const Bf16Batch&, bool, bool, int64_t, int64_t, \
                                               int64_t, const BFloat16*, int64_t,              \
                                               const BFloat16*, int64_t, Out*);                \
  template void gemm_bf16_strided_batched_reference<Out>(                                      \
      const Bf16Batch&, bool, bool, int64_t, int64_t, int64_t, const BFloat16*, int64_t,       \
      const BFloat16*, int64_t, Out*);
LS_INSTANTIATE_STRIDED_BATCHED(float)
LS_INSTANTIATE_STRIDED_BATCHED(BFloat16)
#undef LS_INSTANTIATE_STRIDED_BATCHED

}  // namespace lockstep::native
