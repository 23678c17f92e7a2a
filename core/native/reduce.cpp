// core/native/reduce.cpp — sum, mean, max/min (with indices), argmax/argmin, sum_to.
//
// Every reduction here is reduced to one shape: a contiguous (A, R, B) array
// reduced over its middle dim R into an (A, B) result,
//     out[a, b] = reduce_r x[a, r, b].
// B == 1 is the common "reduce the innermost dim" case (a row per output:
// loss over classes, layer-norm statistics); A == 1 is "reduce the outer dims"
// (the bias gradient: (N, C) summed over N, which runs as N vectorised row
// additions into one accumulator row). Reducing a set of dims that is not one
// adjacent block, such as (N, C, H, W) over {0, 2, 3}, takes one (A, R, B)
// pass per block, innermost first, so each pass shrinks the data.
//
// Accuracy: float32 sums accumulate in double. The row loops stay vectorised
// (a float -> double conversion per element is cheap next to the memory
// traffic), so the result is accurate to float32 rounding for any length, and
// there is no need for pairwise summation. Integer and bool sums give int64.
// Long rows are summed in fixed blocks of detail::kGrain elements, in parallel,
// and the block sums are added in order: the result does not depend on the
// thread count.
//
// Read before: core/native/elementwise.cpp. Read next: core/native/softmax.cpp.
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/native/elementwise_loop.h"
#include "core/native/cuda_dispatch.h"
#include "core/native/native.h"
#include "core/native/reduce_rules.h"

namespace lockstep::native {

using detail::kGrain;
using namespace rules;  // Note [Shared kernel rules]

namespace {

// Runs fn(a, b0, b1) over the (A, B) outputs in parallel, each call a run of
// consecutive b in one row a. `work` is the cost of one output (R elements).
template <class F>
void for_each_output_run(int64_t A, int64_t B, int64_t work, F&& fn) {
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(work, 1));
  parallel_for(0, A * B, grain, [&](int64_t lo, int64_t hi) {
    while (lo < hi) {
      const int64_t a = lo / B;
      const int64_t b0 = lo % B;
      const int64_t b1 = std::min(B, b0 + (hi - lo));
      fn(a, b0, b1);
      lo += b1 - b0;
    }
  });
}

// Independent running sums (or maxima) a row loop keeps, so consecutive vector
// operations don't wait on each other's latency; a multiple of any vector width.
constexpr int64_t kLanes = 32;

// Sum of n contiguous elements, vectorised (see Note [Vectorising loops]).
template <class Acc, class T>
Acc sum_contiguous(const T* x, int64_t n) {
  Acc lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] += static_cast<Acc>(x[i + j]);
  }
  Acc acc = 0;
  for (; i < n; ++i) acc += static_cast<Acc>(x[i]);
  for (Acc l : lanes) acc += l;
  return acc;
}

// Sum of one long row: fixed blocks summed in parallel, then added in order.
template <class Acc, class T>
Acc sum_row(const T* x, int64_t n) {
  if (n <= kGrain) return sum_contiguous<Acc>(x, n);
  const int64_t blocks = (n + kGrain - 1) / kGrain;
  std::vector<Acc> partial(static_cast<size_t>(blocks));
  parallel_for(0, blocks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k) {
      partial[k] = sum_contiguous<Acc>(x + k * kGrain, std::min(kGrain, n - k * kGrain));
    }
  });
  Acc total = 0;
  for (Acc p : partial) total += p;
  return total;
}

// out[a, b] = sum_r x[a, r, b] for a contiguous x of shape (A, R, B).
template <class Acc, class T>
void sum_3d(const T* x, Acc* out, int64_t A, int64_t R, int64_t B) {
  if (B == 1) {
    const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(R, 1));
    parallel_for(0, A, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t a = lo; a < hi; ++a) out[a] = sum_row<Acc>(x + a * R, R);
    });
    return;
  }
  for_each_output_run(A, B, R, [&](int64_t a, int64_t b0, int64_t b1) {
    Acc* o = out + a * B;
    for (int64_t b = b0; b < b1; ++b) o[b] = 0;
    for (int64_t r = 0; r < R; ++r) {
      const T* row = x + (a * R + r) * B;
#pragma omp simd
      for (int64_t b = b0; b < b1; ++b) o[b] += static_cast<Acc>(row[b]);
    }
  });
}

// Sums a contiguous x of shape `sizes` over the masked dims; returns the sums in
// row-major order of the kept dims.
template <class Acc, class T>
std::vector<Acc> sum_dims(const T* x, const IntList& sizes, const std::vector<bool>& mask) {
  // Group adjacent dims with the same mask into blocks (size-1 dims don't matter).
  IntList block_size;
  std::vector<bool> block_reduced;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    if (!block_size.empty() && block_reduced.back() == mask[d]) {
      block_size.back() *= sizes[d];
    } else {
      block_size.push_back(sizes[d]);
      block_reduced.push_back(mask[d]);
    }
  }
  // The first pass reads x; later passes read the previous pass's sums.
  std::vector<Acc> current;
  bool first = true;
  while (true) {
    int64_t k = static_cast<int64_t>(block_size.size()) - 1;
    while (k >= 0 && !block_reduced[k]) --k;
    if (k < 0) break;
    int64_t A = 1, B = 1;
    for (int64_t i = 0; i < k; ++i) A *= block_size[i];
    for (size_t i = k + 1; i < block_size.size(); ++i) B *= block_size[i];
    std::vector<Acc> next(static_cast<size_t>(A * B));
    if (first) {
      sum_3d<Acc>(x, next.data(), A, block_size[k], B);
    } else {
      sum_3d<Acc>(current.data(), next.data(), A, block_size[k], B);
    }
    current = std::move(next);
    first = false;
    block_size.erase(block_size.begin() + k);
    block_reduced.erase(block_reduced.begin() + k);
  }
  if (first) {  // nothing to reduce: the sums are the elements themselves
    const int64_t n = numel_of(sizes);
    current.assign(x, x + n);
  }
  return current;
}

// sum and mean: the sums, divided by the number of reduced elements for mean.
Tensor sum_impl(const Tensor& t, const IntList& dims, bool keepdim, bool is_mean) {
  const char* op = is_mean ? "mean" : "sum";
  check_defined(t, op);
  if (is_mean) check_mean_dtype(t);
  const std::vector<bool> mask = reduced_mask(t, dims, op);
  int64_t count = 1;
  for (size_t d = 0; d < mask.size(); ++d) {
    if (mask[d]) count *= t.sizes()[d];
  }
  const ScalarType out_dtype = sum_dtype(t.dtype());
  Tensor out = empty(reduced_shape(t.sizes(), mask, keepdim), out_dtype);
  const Tensor x = contiguous(t);
  dispatch(t.dtype(), op, [&]<class T>() {
    using Acc = SumAcc<T>;
    std::vector<Acc> sums = sum_dims<Acc>(x.data_ptr<T>(), x.sizes(), mask);
    dispatch(out_dtype, op, [&]<class O>() {
      O* o = out.data_ptr<O>();
      const int64_t n = static_cast<int64_t>(sums.size());
      if (is_mean) {
        // 0 / 0 = NaN for the mean of nothing, as in PyTorch.
        const Acc inv = static_cast<Acc>(1) / static_cast<Acc>(count);
        for (int64_t i = 0; i < n; ++i) o[i] = static_cast<O>(sums[i] * inv);
      } else {
        for (int64_t i = 0; i < n; ++i) o[i] = static_cast<O>(sums[i]);
      }
    });
  });
  return out;
}

template <class T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(v);
  } else {
    return false;
  }
}

// Whether v replaces best as the max (kMax) or min so far. Strict comparison
// keeps the first index among ties; NaN wins over numbers, like PyTorch.
template <bool kMax, class T>
bool better(T v, T best) {
  if constexpr (kMax) {
    return v > best || (is_nan(v) && !is_nan(best));
  } else {
    return v < best || (is_nan(v) && !is_nan(best));
  }
}

// The max/min of one contiguous row (n >= 1) and the index where it first occurs:
// a vectorised pass over kLanes running extremes, then a scan for the first match.
template <bool kMax, class T>
void extreme_row(const T* x, int64_t n, T* value, int64_t* index) {
  T lanes[kLanes];
  for (int64_t j = 0; j < kLanes; ++j) lanes[j] = x[0];
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] = better<kMax>(x[i + j], lanes[j]) ? x[i + j] : lanes[j];
  }
  T best = x[0];
  for (; i < n; ++i) best = better<kMax>(x[i], best) ? x[i] : best;
  for (T l : lanes) best = better<kMax>(l, best) ? l : best;
  int64_t k = 0;
  if (is_nan(best)) {
    while (!is_nan(x[k])) ++k;
  } else {
    while (x[k] != best) ++k;
  }
  *value = best;
  *index = k;
}

// values[a, b], indices[a, b] = max/min over r of x[a, r, b] (contiguous, R >= 1).
template <bool kMax, class T>
void extreme_3d(const T* x, T* values, int64_t* indices, int64_t A, int64_t R, int64_t B) {
  if (B == 1) {
    const int64_t grain = std::max<int64_t>(1, kGrain / R);
    parallel_for(0, A, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t a = lo; a < hi; ++a) extreme_row<kMax>(x + a * R, R, values + a, indices + a);
    });
    return;
  }
  for_each_output_run(A, B, R, [&](int64_t a, int64_t b0, int64_t b1) {
    T* v = values + a * B;
    int64_t* ix = indices + a * B;
    const T* first = x + a * R * B;
    for (int64_t b = b0; b < b1; ++b) {
      v[b] = first[b];
      ix[b] = 0;
    }
    for (int64_t r = 1; r < R; ++r) {
      const T* row = x + (a * R + r) * B;
      for (int64_t b = b0; b < b1; ++b) {
        if (better<kMax>(row[b], v[b])) {
          v[b] = row[b];
          ix[b] = r;
        }
      }
    }
  });
}

template <bool kMax>
std::tuple<Tensor, Tensor> extreme_dim(const Tensor& t, int64_t dim, bool keepdim,
                                        const char* op) {
  const DimReduction r = dim_reduction(t, dim, keepdim, op);
  const int64_t A = r.A, R = r.R, B = r.B;
  const IntList& shape = r.out_shape;
  Tensor values = empty(shape, t.dtype());
  Tensor indices = empty(shape, kInt64);
  const Tensor x = contiguous(t);
  dispatch(t.dtype(), op, [&]<class T>() {
    extreme_3d<kMax>(x.data_ptr<T>(), values.data_ptr<T>(), indices.data_ptr<int64_t>(), A, R, B);
  });
  return {values, indices};
}

template <bool kMax>
Tensor extreme_all(const Tensor& t, const char* op) {
  check_extreme_all(t, op);
  Tensor value = empty({}, t.dtype());
  int64_t index = 0;
  const Tensor x = contiguous(t);
  dispatch(t.dtype(), op, [&]<class T>() {
    extreme_3d<kMax>(x.data_ptr<T>(), value.data_ptr<T>(), &index, 1, t.numel(), 1);
  });
  return value;
}

}  // namespace

Tensor sum(const Tensor& t, const IntList& dims, bool keepdim) {
  LS_DISPATCH_CUDA(t, sum(t, dims, keepdim));
  return sum_impl(t, dims, keepdim, /*is_mean=*/false);
}

Tensor sum_rows_to_float(const Tensor& t) {
  check_defined(t, "sum_rows_to_float");
  LS_CHECK(t.dim() == 2 && (t.dtype() == kFloat32 || t.dtype() == kBFloat16) && t.device().is_cpu(),
           "sum_rows_to_float: expected a 2-d float32 or bfloat16 CPU tensor, got ", dtype_name(t.dtype()), " ",
           t.shape_str());
  const Tensor x = contiguous(t);
  const int64_t m = x.size(0), n = x.size(1);
  std::vector<double> sums(static_cast<size_t>(n));
  if (x.dtype() == kBFloat16) {
    sum_3d<double>(x.data_ptr<BFloat16>(), sums.data(), 1, m, n);
  } else {
    sum_3d<double>(x.data_ptr<float>(), sums.data(), 1, m, n);
  }
  Tensor out = empty({n}, kFloat32);
  float* o = out.data_ptr<float>();
  for (int64_t j = 0; j < n; ++j) o[j] = static_cast<float>(sums[static_cast<size_t>(j)]);
  return out;
}

Tensor mean(const Tensor& t, const IntList& dims, bool keepdim) {
  LS_DISPATCH_CUDA(t, mean(t, dims, keepdim));
  return sum_impl(t, dims, keepdim, /*is_mean=*/true);
}

Tensor max_all(const Tensor& t) {
  LS_DISPATCH_CUDA(t, max_all(t));
  return extreme_all<true>(t, "max");
}
Tensor min_all(const Tensor& t) {
  LS_DISPATCH_CUDA(t, min_all(t));
  return extreme_all<false>(t, "min");
}

std::tuple<Tensor, Tensor> max_dim(const Tensor& t, int64_t dim, bool keepdim) {
  LS_DISPATCH_CUDA(t, max_dim(t, dim, keepdim));
  return extreme_dim<true>(t, dim, keepdim, "max");
}

std::tuple<Tensor, Tensor> min_dim(const Tensor& t, int64_t dim, bool keepdim) {
  LS_DISPATCH_CUDA(t, min_dim(t, dim, keepdim));
  return extreme_dim<false>(t, dim, keepdim, "min");
}

Tensor argmax(const Tensor& t, int64_t dim, bool keepdim) {
  LS_DISPATCH_CUDA(t, argmax(t, dim, keepdim));
  return std::get<1>(extreme_dim<true>(t, dim, keepdim, "argmax"));
}

Tensor argmin(const Tensor& t, int64_t dim, bool keepdim) {
  LS_DISPATCH_CUDA(t, argmin(t, dim, keepdim));
  return std::get<1>(extreme_dim<false>(t, dim, keepdim, "argmin"));
}

// When grad already has `shape` there is nothing to sum and grad itself is
// returned (no copy), as PyTorch's sum_to does; callers must not write into it.
Tensor sum_to(const Tensor& grad, const IntList& shape) {
  LS_DISPATCH_CUDA(grad, sum_to(grad, shape));
  check_defined(grad, "sum_to");
  if (grad.sizes() == shape) return grad;
  // A bfloat16 gradient (a broadcast operand of a bf16 matmul) is summed in
  // float32 and rounded once, as the bf16 GEMMs accumulate.
  if (grad.dtype() == kBFloat16) return to_dtype(sum_to(to_dtype(grad, kFloat32), shape), kBFloat16);
  const IntList dims = sum_to_dims(grad, shape);
  // Summing with keepdim then dropping the leading dims is a view: the sums are
  // laid out in the same order either way.
  Tensor summed = sum(grad, dims, /*keepdim=*/true);
  return view(summed, shape);
}

}  // namespace lockstep::native
