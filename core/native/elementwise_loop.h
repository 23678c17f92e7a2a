// core/native/elementwise_loop.h — the loop behind every elementwise kernel.
//
// map_elements<Out, In...>(out, {in...}, f) sets out[idx] = f(in0[idx], in1[idx], ...)
// for every index idx of out's shape. Inputs broadcast to out's shape; out may be
// any non-overlapping strided tensor (binary_ writes into `self`, which may be a view).
// It works in three steps:
//   1. strides:  every operand's strides over out's shape (0 on broadcast dims);
//   2. coalesce: merge neighbouring dims that every operand steps through as one,
//                so contiguous operands become 1-d and a bias add (N, C) + (C)
//                stays 2-d (see coalesce_dims);
//   3. loop:     the elements are split into chunks across threads; each chunk
//                walks runs of the innermost dim. A run whose operands all have
//                stride 1 is a plain indexed loop the compiler vectorises; other
//                runs step each pointer by its own stride (gathers).
//
// § Note [Vectorising loops]
// GCC at -O2 only vectorises loops that need no runtime alias checks and no scalar
// epilogue, which rules out almost every kernel loop (pointers may alias, n is
// rarely a multiple of the vector width). `#pragma omp simd` states that the
// iterations are independent, so the loop is vectorised anyway; the build compiles
// with OpenMP. An in-place op (out == in0) is still independent per element.
// Loops that call libm (exp, erf, tanh, ...) run one element at a time, since
// glibc declares its vector math functions only under -ffast-math; for the two
// that dominate training time, see Note [Vectorisable exp and erf].
//
// § Note [Vectorisable exp and erf]
// exp (softmax, sigmoid) and erf (GELU) are the hot transcendental functions.
// For float32, exp_simd and erf_simd below compute them with plain arithmetic
// (range reduction, a polynomial, an exponent built from bits), which the
// compiler vectorises inside an omp simd loop, unlike calls to expf/erff per
// element (measured: docs/results/kernel_choices.md). Both stay within 1.03 ulp of the exact result (measured
// on every 7th float32 when written; tests/core/test_unary.cpp checks <= 2 ulp)
// and handle inf and NaN; exp underflows gradually through the subnormals.
// float64 (gradcheck) uses libm.
// They are always inlined: a call inside a loop would stop its vectorisation.
//
// § Note [bfloat16 elementwise]
// bfloat16 is the upper half of a float32, so widening is exact and costs a
// shift. Elementwise kernels on bf16 tensors (add, mul, relu, gelu, dropout, the
// activation backwards) store BFloat16 but compute in float: map_elements reads
// BFloat16 operands, the element function takes and returns float (implicit
// conversions), and the store rounds to nearest even once per result. Contiguous
// runs go through float buffers (run_widened): widen, the float loop, round.
// So a bf16 kernel is the float32 kernel on bf16-rounded inputs, rounded once at the end;
// tests/core/test_bf16_kernels.cpp checks exactly that. Reductions and
// normalisations never accumulate in bf16 (Note [Autocast policy] in core/autocast.h).
//
// Read before: core/shape.h (broadcast_strides), core/parallel.h.
// Read next: core/native/elementwise.cpp, core/native/unary.cpp.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/parallel.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace lockstep::native::detail {

// Elements per parallel chunk: below this, threads cost more than they save.
inline constexpr int64_t kGrain = 32768;

// exp(x); see Note [Vectorisable exp and erf]. For float: exp(x) = 2^n * exp(r) with
// n = round(x / ln 2) and |r| <= ln(2) / 2; exp(r) by Cephes' degree-7 polynomial,
// 2^n as two float exponents (so n can reach the subnormal range without overflow).
template <class T>
[[gnu::always_inline]] inline T exp_simd(T x) {
  if constexpr (!std::is_same_v<T, float>) {
    return std::exp(x);
  } else {
    constexpr float kLog2e = 1.44269504088896341f;
    constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;  // ln 2 = hi + lo
    const float xc = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);   // exp is 0 / inf beyond
    const float n = (xc * kLog2e + 12582912.0f) - 12582912.0f;  // round to nearest (1.5 * 2^23)
    float r = std::fma(n, -kLn2Hi, xc);
    r = std::fma(n, -kLn2Lo, r);
    float p = 1.9875691500e-4f;
    p = std::fma(p, r, 1.3981999507e-3f);
    p = std::fma(p, r, 8.3334519073e-3f);
    p = std::fma(p, r, 4.1665795894e-2f);
    p = std::fma(p, r, 1.6666665459e-1f);
    p = std::fma(p, r, 5.0000001201e-1f);
    p = std::fma(p, r * r, r) + 1.0f;
    const int32_t n1 = static_cast<int32_t>(n) / 2, n2 = static_cast<int32_t>(n) - n1;
    const float y = p * std::bit_cast<float>((n1 + 127) << 23) * std::bit_cast<float>((n2 + 127) << 23);
    return x != x ? x : y;  // NaN stays NaN
  }
}

// erf(x); see Note [Vectorisable exp and erf]. For float: two minimax fits (N. Juffa's
// erff), x * P(x^2) for |x| <= 0.9277 and 1 - exp(Q(|x|)) beyond, both computed so the
// loop stays branch-free, then one is selected.
template <class T>
[[gnu::always_inline]] inline T erf_simd(T x) {
  if constexpr (!std::is_same_v<T, float>) {
    return std::erf(x);
  } else {
    const float t = std::fabs(x), s = x * x;
    float q = std::fma(-1.72853470e-5f, t, 3.83197126e-4f);
    const float u = std::fma(-3.88396438e-3f, t, 2.42546219e-2f);
    q = std::fma(q, s, u);
    q = std::fma(q, t, -1.06777877e-1f);
    q = std::fma(q, t, -6.34846687e-1f);
    q = std::fma(q, t, -1.28717512e-1f);
    q = std::fma(q, t, -t);
    const float large = std::copysign(1.0f - exp_simd(q), x);
    float p = -5.96761703e-4f;
    p = std::fma(p, s, 4.99119423e-3f);
    p = std::fma(p, s, -2.67681349e-2f);
    p = std::fma(p, s, 1.12819925e-1f);
    p = std::fma(p, s, -3.76125336e-1f);
    p = std::fma(p, s, 1.28379166e-1f);
    const float small = std::fma(p, x, x);
    return t > 0.927734375f ? large : small;
  }
}

// Reorders the dims so that out's strides decrease (a stable sort): the loop then
// walks out in memory order, and a channels-last out with channels-last inputs
// (Note [Channels-last activations] in core/native/memory_format.h) coalesces to
// one flat run instead of gathers along W. Any order is correct: every element is
// computed on its own.
template <size_t N>
void order_dims_like_out(IntList& sizes, std::array<IntList, N>& strides) {
  const size_t nd = sizes.size();
  bool ordered = true;
  for (size_t d = 1; d < nd && ordered; ++d) ordered = strides[0][d - 1] >= strides[0][d];
  if (ordered) return;
  std::vector<size_t> perm(nd);
  for (size_t d = 0; d < nd; ++d) perm[d] = d;
  std::stable_sort(perm.begin(), perm.end(),
                   [&](size_t a, size_t b) { return strides[0][a] > strides[0][b]; });
  IntList new_sizes(nd);
  std::array<IntList, N> new_strides;
  for (size_t k = 0; k < N; ++k) new_strides[k].resize(nd);
  for (size_t d = 0; d < nd; ++d) {
    new_sizes[d] = sizes[perm[d]];
    for (size_t k = 0; k < N; ++k) new_strides[k][d] = strides[k][perm[d]];
  }
  sizes = std::move(new_sizes);
  strides = std::move(new_strides);
}

// Drops size-1 dims and merges dim d into the dim before it wherever every operand
// has stride[d-1] == stride[d] * size[d] (the two dims are then one longer dim).
// Leaves at least one dim, so a 0-d tensor becomes sizes {1}.
template <size_t N>
void coalesce_dims(IntList& sizes, std::array<IntList, N>& strides) {
  IntList new_sizes;
  std::array<IntList, N> new_strides;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    bool merge = !new_sizes.empty();
    for (size_t k = 0; k < N && merge; ++k) {
      merge = new_strides[k].back() == strides[k][d] * sizes[d];
    }
    if (merge) {
      new_sizes.back() *= sizes[d];
      for (size_t k = 0; k < N; ++k) new_strides[k].back() = strides[k][d];
    } else {
      new_sizes.push_back(sizes[d]);
      for (size_t k = 0; k < N; ++k) new_strides[k].push_back(strides[k][d]);
    }
  }
  if (new_sizes.empty()) {
    new_sizes.push_back(1);
    for (size_t k = 0; k < N; ++k) new_strides[k].push_back(0);
  }
  sizes = std::move(new_sizes);
  strides = std::move(new_strides);
}

// True when some element of t is reachable from two indices (a dim of size > 1
// with stride 0, as made by expand): writing into t would then race with itself.
inline bool has_internal_overlap(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) > 1 && t.stride(d) == 0) return true;
  }
  return false;
}

// The type a stored element computes in: float for BFloat16, itself otherwise.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, BFloat16>, float, T>;

// True when some operand is stored as BFloat16 and f computes in float (its result
// is float when called on the widened operands): such runs take run_widened.
template <class F, class Out, class... In>
inline constexpr bool kComputesWidened =
    (std::is_same_v<Out, BFloat16> || (std::is_same_v<In, BFloat16> || ...)) &&
    std::is_same_v<std::invoke_result_t<F&, compute_t<In>...>, float>;

// dst = v, rounding a float into a BFloat16 through its bits (core/half.h: a
// BFloat16 temporary stops an omp simd loop from vectorising).
template <class S, class C>
[[gnu::always_inline]] inline void store_element(S& dst, C v) {
  if constexpr (std::is_same_v<S, BFloat16>) {
    dst.bits = BFloat16::round_bits(static_cast<float>(v));
  } else {
    dst = static_cast<S>(v);
  }
}

// A contiguous run with bf16 operands, one block of kWidenBlock elements at a time:
// widen the bf16 inputs into float buffers, run f over floats (the float32 kernel's
// loop, which vectorises; f mixing widening and rounding into one loop often does
// not), round into the bf16 output. The same values as the plain loop: widening is
// exact, f sees the same floats and each result is rounded once (Note [bfloat16
// elementwise]).
inline constexpr int64_t kWidenBlock = 512;

template <class S>
[[gnu::always_inline]] inline const compute_t<S>* widen_block(const S* src, float* buffer, int64_t m) {
  if constexpr (std::is_same_v<S, BFloat16>) {
#pragma omp simd
    for (int64_t i = 0; i < m; ++i) buffer[i] = static_cast<float>(src[i]);
    return buffer;
  } else {
    return src;
  }
}

template <class Out, class... In, class F, size_t... I>
[[gnu::always_inline]] inline void run_widened(Out* o, const std::tuple<const In*...>& p, int64_t len, F& f,
                                               std::index_sequence<I...>) {
  alignas(64) float wide[sizeof...(In) + 1][kWidenBlock];
  for (int64_t b = 0; b < len; b += kWidenBlock) {
    const int64_t m = std::min(kWidenBlock, len - b);
    const std::tuple<const compute_t<In>*...> q(widen_block(std::get<I>(p) + b, wide[I + 1], m)...);
    if constexpr (std::is_same_v<Out, BFloat16>) {
      float* w = wide[0];
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) w[i] = f(std::get<I>(q)[i]...);
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) store_element(o[b + i], w[i]);
    } else {
      Out* w = o + b;
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) w[i] = static_cast<Out>(f(std::get<I>(q)[i]...));
    }
  }
}

// out[idx] = f(inputs[0][idx], inputs[1][idx], ...); see the file comment.
// Out and In... are the element types of out and the inputs (dtypes must match).
template <class Out, class... In, class F>
void map_elements(const Tensor& out, const std::array<Tensor, sizeof...(In)>& inputs, F f) {
  constexpr size_t N = sizeof...(In) + 1;  // operand 0 is out
  // A CPU kernel never reads device memory: a CUDA operand here means an op
  // without a CUDA kernel, or operands on different devices.
  const auto check_cpu = [](const Tensor& t) {
    LS_CHECK(t.device().is_cpu(), "a CPU elementwise kernel got a tensor on ", t.device().str(),
             ": this op has no CUDA kernel, or its operands are on different devices; move "
             "every operand to one device with .to(...)");
  };
  check_cpu(out);
  for (const Tensor& t : inputs) check_cpu(t);
  const int64_t numel = out.numel();
  if (numel == 0) return;

  // 1-2. Strides over out's shape, then coalesced.
  IntList sizes = out.sizes();
  std::array<IntList, N> strides;
  strides[0] = out.strides();
  for (size_t k = 1; k < N; ++k) {
    strides[k] = broadcast_strides(inputs[k - 1].sizes(), inputs[k - 1].strides(), sizes);
  }
  order_dims_like_out(sizes, strides);
  coalesce_dims(sizes, strides);
  const int64_t ndim = static_cast<int64_t>(sizes.size());
  const int64_t inner = sizes[ndim - 1];
  std::array<int64_t, N> inner_stride;
  bool all_unit = true;
  for (size_t k = 0; k < N; ++k) {
    inner_stride[k] = strides[k][ndim - 1];
    all_unit = all_unit && inner_stride[k] == 1;
  }

  Out* out_base = out.data_ptr<Out>();
  const auto in_base = [&]<size_t... I>(std::index_sequence<I...>) {
    return std::tuple<const In*...>(inputs[I].template data_ptr<In>()...);
  }(std::index_sequence_for<In...>{});

  // One run of `len` elements along the innermost dim, starting at element offsets `off`.
  // `flatten` inlines f into the loops: a call left inside would stop vectorisation.
  auto run = [&]<size_t... I>(std::index_sequence<I...>, const std::array<int64_t, N>& off,
                              int64_t len) __attribute__((flatten)) {
    Out* o = out_base + off[0];
    const std::tuple<const In*...> p(std::get<I>(in_base) + off[I + 1]...);
    if constexpr (kComputesWidened<F, Out, In...>) {
      if (all_unit) return run_widened<Out, In...>(o, p, len, f, std::index_sequence<I...>{});
    }
    if (all_unit) {
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) o[i] = f(std::get<I>(p)[i]...);
    } else {
      const std::array<int64_t, N> s = inner_stride;
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) o[i * s[0]] = f(std::get<I>(p)[i * s[I + 1]]...);
    }
  };

  // 3. Each chunk [lo, hi) of the row-major element order: find lo's index and
  // offsets, then alternate runs along the innermost dim with odometer steps.
  parallel_for(0, numel, kGrain, [&](int64_t lo, int64_t hi) {
    IntList index(static_cast<size_t>(ndim));
    std::array<int64_t, N> off{};
    int64_t rest = lo;
    for (int64_t d = ndim - 1; d >= 0; --d) {
      index[d] = rest % sizes[d];
      rest /= sizes[d];
      for (size_t k = 0; k < N; ++k) off[k] += index[d] * strides[k][d];
    }
    while (lo < hi) {
      const int64_t len = std::min(inner - index[ndim - 1], hi - lo);
      run(std::index_sequence_for<In...>{}, off, len);
      lo += len;
      if (lo >= hi) break;
      // Move to the start of the next row: reset the inner dim, carry into the outer ones.
      for (size_t k = 0; k < N; ++k) off[k] -= index[ndim - 1] * strides[k][ndim - 1];
      index[ndim - 1] = 0;
      for (int64_t d = ndim - 2; d >= 0; --d) {
        for (size_t k = 0; k < N; ++k) off[k] += strides[k][d];
        if (++index[d] < sizes[d]) break;
        for (size_t k = 0; k < N; ++k) off[k] -= sizes[d] * strides[k][d];
        index[d] = 0;
      }
    }
  });
}

}  // namespace lockstep::native::detail
