// core/cuda/cuda_loops.cuh — what every CUDA kernel file shares: device element
// types, dtype dispatch for device code, element conversion, the strided-offset
// helper, and the elementwise launchers built on it.
//
// § Note [CUDA strided loops]
// A device kernel sees a tensor as (base pointer, sizes, strides). StridedCalc<N>
// holds the shape of the output and the strides of N operands over that shape
// (0 on broadcast dims, from broadcast_strides), after merging neighbouring dims
// that every operand steps through as one (so contiguous operands become 1-d).
// offsets(i, off) turns the row-major linear index i into each operand's element
// offset: peel the index dim by dim from the innermost. Everything is int64, so
// tensors beyond 2^31 elements index correctly. At most kMaxDims (8) dims remain
// after merging; more is refused with an error that says to call contiguous().
// Kernels are grid-stride loops: a capped grid of 256-thread blocks walks any n.
// Functors, not lambdas, carry the element functions (nvcc's device lambdas need
// --extended-lambda, which the build does not set).
// Read before: core/cuda/cuda_context.h, core/shape.h.
// Read next: core/cuda/memory.cu, core/cuda/elementwise.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <array>
#include <type_traits>

#include "core/cuda/cuda_context.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace lockstep::cuda_native::detail {

inline constexpr int kMaxDims = 8;
inline constexpr int kThreads = 256;

// ---- device element types and dispatch ----

// The device type of a dtype's elements: CUDA's __half / __nv_bfloat16 for the
// 16-bit types (lockstep's host Half/BFloat16 have host-only conversions).
template <class F>
decltype(auto) dev_dispatch_all(ScalarType t, F&& fn) {
  switch (t) {
    case kFloat32: return fn.template operator()<float>();
    case kFloat64: return fn.template operator()<double>();
    case kInt64: return fn.template operator()<int64_t>();
    case kInt32: return fn.template operator()<int32_t>();
    case kUInt8: return fn.template operator()<uint8_t>();
    case kBool: return fn.template operator()<bool>();
    case kFloat16: return fn.template operator()<__half>();
    case kBFloat16: return fn.template operator()<__nv_bfloat16>();
  }
  throw Error("cuda dispatch_all: unknown dtype");
}

// The computing dtypes (not f16/bf16), like lockstep::dispatch.
template <class F>
decltype(auto) dev_dispatch(ScalarType t, const char* op, F&& fn) {
  switch (t) {
    case kFloat32: return fn.template operator()<float>();
    case kFloat64: return fn.template operator()<double>();
    case kInt64: return fn.template operator()<int64_t>();
    case kInt32: return fn.template operator()<int32_t>();
    case kUInt8: return fn.template operator()<uint8_t>();
    case kBool: return fn.template operator()<bool>();
    default: break;
  }
  throw Error(lockstep::detail::str(op, " (CUDA): dtype ", dtype_name(t),
                                    " is a storage-only type; convert with .to(ls::kFloat32) first"));
}

template <class F>
decltype(auto) dev_dispatch_floating(ScalarType t, const char* op, F&& fn) {
  if (t == kFloat32) return fn.template operator()<float>();
  if (t == kFloat64) return fn.template operator()<double>();
  throw Error(lockstep::detail::str(op, " (CUDA): expected a float32 or float64 tensor but got ",
                                    dtype_name(t), "; convert with .to(ls::kFloat32)"));
}

template <class T>
inline constexpr bool is_16bit_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// § Note [16-bit elements computed in float]
// bfloat16 is a storage type: a kernel reads it, computes in a float register
// and rounds once when it stores, as the CPU's bf16 loops do (Note [bfloat16
// elementwise] in core/native/elementwise_loop.h; Note [Autocast policy] in
// core/autocast.h). dev_dispatch_compute calls fn.template operator()<S, C>()
// with S the element type as stored and C the type the functor computes in:
// C = S for the computing dtypes, float for bfloat16. Functors written for C then
// run on bf16 tensors through Widened1/2 and WidenedWhere below, which convert
// each operand S -> C and the result C -> S. float16 stays storage-only (convert
// it first), as on the CPU.
template <class S>
using compute_t = std::conditional_t<is_16bit_v<S>, float, S>;

template <class F>
decltype(auto) dev_dispatch_compute(ScalarType t, const char* op, F&& fn) {
  if (t == kBFloat16) return fn.template operator()<__nv_bfloat16, float>();
  return dev_dispatch(t, op, [&]<class T>() { return fn.template operator()<T, T>(); });
}

// The floating dtypes and bfloat16, as dev_dispatch_compute.
template <class F>
decltype(auto) dev_dispatch_floating_compute(ScalarType t, const char* op, F&& fn) {
  if (t == kBFloat16) return fn.template operator()<__nv_bfloat16, float>();
  return dev_dispatch_floating(t, op, [&]<class T>() { return fn.template operator()<T, T>(); });
}

template <class T>
__device__ __forceinline__ float to_float(T v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return static_cast<float>(v);
  }
}

// One element from S to D; the 16-bit types convert through float (round to
// nearest even), exactly as lockstep::convert does on the host.
template <class D, class S>
__device__ __forceinline__ D convert(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_same_v<D, __half>) {
    return __float2half_rn(to_float(v));  // through float, bit for bit like the CPU's Half
  } else if constexpr (std::is_same_v<D, __nv_bfloat16>) {
    return __float2bfloat16_rn(to_float(v));
  } else if constexpr (is_16bit_v<S>) {
    return static_cast<D>(to_float(v));
  } else {
    return static_cast<D>(v);
  }
}

// F (computing in C = compute_t<S>) applied to operands stored as S, its result
// stored as R (S unless the functor returns bool or another type) — see
// Note [16-bit elements computed in float]. With S == C they are F itself.
template <class S, class F>
struct Widened1 {
  F f;
  template <class A>
  __device__ auto operator()(A a) const {
    return store(f(convert<compute_t<S>>(a)));
  }
  template <class V>
  __device__ static auto store(V v) {
    if constexpr (std::is_same_v<V, compute_t<S>>) {
      return convert<S>(v);
    } else {
      return v;
    }
  }
};

template <class S, class F>
struct Widened2 {
  F f;
  template <class A, class B>
  __device__ auto operator()(A a, B b) const {
    return Widened1<S, F>::store(f(convert<compute_t<S>>(a), convert<compute_t<S>>(b)));
  }
};

// The condition of where stays bool; the two values are widened.
template <class S, class F>
struct WidenedWhere {
  F f;
  __device__ S operator()(bool c, S a, S b) const {
    return convert<S>(f(c, convert<compute_t<S>>(a), convert<compute_t<S>>(b)));
  }
};

// The first element of t, typed for device code (no host access happens).
template <class T>
T* dev_ptr(const Tensor& t) {
  return reinterpret_cast<T*>(t.raw_data());
}

// Throws unless every defined tensor is on `device`, naming the op and the devices.
void check_on_device(const char* op, Device device, std::initializer_list<const Tensor*> tensors);


// ---- grid-stride launches ----

inline unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > (1 << 16) ? (1 << 16) : blocks));
}

// ---- strided offsets (Note [CUDA strided loops]) ----

template <int N>
struct StridedCalc {
  int ndim = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[N][kMaxDims];

  // linear < numel; the outermost dim needs no division (what is left of
  // linear is its index), so a merged contiguous operand costs no division at all.
  __device__ __forceinline__ void offsets(int64_t linear, int64_t* off) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 1; --d) {
      const int64_t i = linear % sizes[d];
      linear /= sizes[d];
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += i * strides[k][d];
    }
    if (ndim > 0) {
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += linear * strides[k][0];
    }
  }
};

// The StridedCalc of `shape` for operands with `operand_strides` (already
// broadcast to `shape`); merges dims and checks the kMaxDims limit.
template <int N>
StridedCalc<N> make_calc(const IntList& shape, const std::array<IntList, N>& operand_strides,
                         const char* op) {
  IntList sizes;
  std::array<IntList, N> strides;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !sizes.empty();
    for (int k = 0; k < N && merge; ++k) {
      merge = strides[k].back() == operand_strides[k][d] * shape[d];
    }
    if (merge) {
      sizes.back() *= shape[d];
      for (int k = 0; k < N; ++k) strides[k].back() = operand_strides[k][d];
    } else {
      sizes.push_back(shape[d]);
      for (int k = 0; k < N; ++k) strides[k].push_back(operand_strides[k][d]);
    }
  }
  LS_CHECK(sizes.size() <= static_cast<size_t>(kMaxDims), op, " (CUDA): the operands need ",
           sizes.size(), " dims after merging but CUDA kernels take at most ", kMaxDims,
           "; call .contiguous() on the inputs first");
  StridedCalc<N> calc;
  calc.ndim = static_cast<int>(sizes.size());
  for (int d = 0; d < calc.ndim; ++d) {
    calc.sizes[d] = sizes[d];
    for (int k = 0; k < N; ++k) calc.strides[k][d] = strides[k][d];
  }
  return calc;
}

// ---- elementwise: out[i] = f(in0[i], ...), inputs broadcast to out's shape ----

template <class Out, class F>
__global__ void map0_kernel(int64_t n, StridedCalc<1> calc, Out* out, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t off[1];
    calc.offsets(i, off);
    out[off[0]] = f();
  }
}

template <class Out, class A, class F>
__global__ void map1_kernel(int64_t n, StridedCalc<2> calc, Out* out, const A* a, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t off[2];
    calc.offsets(i, off);
    out[off[0]] = f(a[off[1]]);
  }
}

template <class Out, class A, class B, class F>
__global__ void map2_kernel(int64_t n, StridedCalc<3> calc, Out* out, const A* a, const B* b, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t off[3];
    calc.offsets(i, off);
    out[off[0]] = f(a[off[1]], b[off[2]]);
  }
}

template <class Out, class A, class B, class C, class F>
__global__ void map3_kernel(int64_t n, StridedCalc<4> calc, Out* out, const A* a, const B* b,
                            const C* c, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t off[4];
    calc.offsets(i, off);
    out[off[0]] = f(a[off[1]], b[off[2]], c[off[3]]);
  }
}

inline IntList strides_over(const Tensor& t, const IntList& shape) {
  return broadcast_strides(t.sizes(), t.strides(), shape);
}

// Host launchers: out is written in place (any non-overlapping strides); the
// element types must match the tensors' dtypes (device types for f16/bf16).
template <class Out, class F>
void map0(const Tensor& out, F f, const char* op) {
  const int64_t n = out.numel();
  if (n == 0) return;
  auto calc = make_calc<1>(out.sizes(), {out.strides()}, op);
  map0_kernel<<<grid_for(n), kThreads, 0, cuda::current_stream(out.device().index)>>>(
      n, calc, dev_ptr<Out>(out), f);
  LS_CUDA_CHECK_LAUNCH();
}

template <class Out, class A, class F>
void map1(const Tensor& out, const Tensor& a, F f, const char* op) {
  const int64_t n = out.numel();
  if (n == 0) return;
  auto calc = make_calc<2>(out.sizes(), {out.strides(), strides_over(a, out.sizes())}, op);
  map1_kernel<<<grid_for(n), kThreads, 0, cuda::current_stream(out.device().index)>>>(
      n, calc, dev_ptr<Out>(out), dev_ptr<const A>(a), f);
  LS_CUDA_CHECK_LAUNCH();
}

template <class Out, class A, class B, class F>
void map2(const Tensor& out, const Tensor& a, const Tensor& b, F f, const char* op) {
  const int64_t n = out.numel();
  if (n == 0) return;
  auto calc = make_calc<3>(
      out.sizes(), {out.strides(), strides_over(a, out.sizes()), strides_over(b, out.sizes())}, op);
  map2_kernel<<<grid_for(n), kThreads, 0, cuda::current_stream(out.device().index)>>>(
      n, calc, dev_ptr<Out>(out), dev_ptr<const A>(a), dev_ptr<const B>(b), f);
  LS_CUDA_CHECK_LAUNCH();
}

template <class Out, class A, class B, class C, class F>
void map3(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c, F f,
          const char* op) {
  const int64_t n = out.numel();
  if (n == 0) return;
  auto calc = make_calc<4>(out.sizes(),
                           {out.strides(), strides_over(a, out.sizes()),
                            strides_over(b, out.sizes()), strides_over(c, out.sizes())},
                           op);
  map3_kernel<<<grid_for(n), kThreads, 0, cuda::current_stream(out.device().index)>>>(
      n, calc, dev_ptr<Out>(out), dev_ptr<const A>(a), dev_ptr<const B>(b), dev_ptr<const C>(c), f);
  LS_CUDA_CHECK_LAUNCH();
}

}  // namespace lockstep::cuda_native::detail
