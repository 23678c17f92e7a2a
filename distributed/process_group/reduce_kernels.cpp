// distributed/process_group/reduce_kernels.cpp — one templated loop per ReduceOp, instantiated
// per dtype; 16-bit floats compute in f32.
// Read before: distributed/process_group/reduce_kernels.h.
#include "distributed/process_group/reduce_kernels.h"

#include <algorithm>
#include <type_traits>

namespace lockstep::distributed::detail {
namespace {

// The type a T is combined in: f16/bf16 widen to float, the rest stay as they are.
template <class T>
using AccType = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

template <ReduceOp op, class A>
inline A combine(A x, A y) {
  if constexpr (op == ReduceOp::SUM || op == ReduceOp::AVG) return x + y;
  if constexpr (op == ReduceOp::PRODUCT) return x * y;
  if constexpr (op == ReduceOp::MAX) return std::max(x, y);
  if constexpr (op == ReduceOp::MIN) return std::min(x, y);
}

template <class T, ReduceOp op>
void reduce_loop(void* out_, const void* a_, const void* b_, size_t n) {
  using A = AccType<T>;
  T* out = static_cast<T*>(out_);
  const T* a = static_cast<const T*>(a_);
  const T* b = static_cast<const T*>(b_);
  for (size_t i = 0; i < n; ++i) {
    out[i] = T(combine<op, A>(static_cast<A>(a[i]), static_cast<A>(b[i])));
  }
}

template <class T>
ReduceFn for_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::AVG: return &reduce_loop<T, ReduceOp::SUM>;
    case ReduceOp::PRODUCT: return &reduce_loop<T, ReduceOp::PRODUCT>;
    case ReduceOp::MAX: return &reduce_loop<T, ReduceOp::MAX>;
    case ReduceOp::MIN: return &reduce_loop<T, ReduceOp::MIN>;
  }
  throw Error("reduce_function: unknown ReduceOp");
}

}  // namespace

bool is_reducible(ScalarType dtype) {
  return dtype == kFloat32 || dtype == kFloat64 || dtype == kFloat16 || dtype == kBFloat16 ||
         dtype == kInt64;
}

ReduceFn reduce_function(ScalarType dtype, ReduceOp op, const char* collective) {
  switch (dtype) {
    case kFloat32: return for_op<float>(op);
    case kFloat64: return for_op<double>(op);
    case kFloat16: return for_op<Half>(op);
    case kBFloat16: return for_op<BFloat16>(op);
    case kInt64: return for_op<int64_t>(op);
    default: break;
  }
  throw Error(lockstep::detail::str(collective, ": cannot reduce a ", dtype_name(dtype), " tensor with ",
                          reduce_op_name(op), "; supported dtypes are float32, float64, float16, "
                          "bfloat16 and int64 (convert with .to(ls::kFloat32) or .to(ls::kInt64))"));
}

void divide_in_place(void* data, ScalarType dtype, int64_t n, int64_t divisor) {
  dispatch_all(dtype, [&]<class T>() {
    using A = AccType<T>;
    T* p = static_cast<T*>(data);
    if constexpr (std::is_same_v<T, bool>) {
      throw Error("divide_in_place: cannot average bool");
    } else {
      for (int64_t i = 0; i < n; ++i) p[i] = T(static_cast<A>(p[i]) / static_cast<A>(divisor));
    }
  });
}

}  // namespace lockstep::distributed::detail
