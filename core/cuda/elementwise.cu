// core/cuda/elementwise.cu — binary ops with broadcasting, scalar ops,
// comparisons, where, allclose and equal on a CUDA device.
//
// The checks and dtype rules are the CPU kernels' (core/native/elementwise.cpp,
// whose file comment states them); only the element loop differs: one
// map1/map2/map3 launch (Note [CUDA strided loops]) with a functor that switches
// on the op at run time (the switch is uniform across a warp, and it keeps the
// number of kernel instantiations, and so nvcc's build time, down). bfloat16
// operands compute in float and round once (Note [16-bit elements computed in
// float] in cuda_loops.cuh), as the CPU's loops do.
// Read before: core/cuda/cuda_loops.cuh, core/native/elementwise.cpp.
// Read next: core/cuda/unary.cu.
#include <cmath>
#include <string>

#include "core/cuda/cuda_loops.cuh"
#include "core/cuda/cuda_native.h"
#include "core/native/elementwise_rules.h"

namespace lockstep::cuda_native {

using namespace detail;
using namespace native::rules;  // Note [Shared kernel rules]

namespace {

// a and b defined and on one CUDA device (the DeviceGuard is the caller's).
void check_pair(const char* name, const Tensor& a, const Tensor& b) {
  check_defined(a, name);
  check_defined(b, name);
  check_on_device(name, a.device(), {&a, &b});
}

void check_writable(const Tensor& self, const char* op) {
  for (int64_t d = 0; d < self.dim(); ++d) {
    LS_CHECK(!(self.size(d) > 1 && self.stride(d) == 0), op, ": self of shape ", self.shape_str(),
             " is an expanded view (several indices share one element) and cannot be written in "
             "place; call .contiguous() or .clone() first");
  }
}

// ---- element functions ----

template <class T>
__device__ __forceinline__ T apply(BinaryOp op, T x, T y) {
  switch (op) {
    case BinaryOp::Add: return static_cast<T>(x + y);
    case BinaryOp::Sub: return static_cast<T>(x - y);
    case BinaryOp::Mul: return static_cast<T>(x * y);
    case BinaryOp::Div: return static_cast<T>(x / y);
    case BinaryOp::Maximum: return (x != x || x > y) ? x : y;  // NaN propagates
    case BinaryOp::Minimum: return (x != x || x < y) ? x : y;
  }
  return x;
}

template <class T, class U>
__device__ __forceinline__ bool apply(CompareOp op, T x, U y) {
  switch (op) {
    case CompareOp::Eq: return x == y;
    case CompareOp::Ne: return x != y;
    case CompareOp::Lt: return x < y;
    case CompareOp::Le: return x <= y;
    case CompareOp::Gt: return x > y;
    case CompareOp::Ge: return x >= y;
  }
  return false;
}

template <class T>
struct BinaryFn {
  BinaryOp op;
  __device__ T operator()(T x, T y) const { return apply(op, x, y); }
};

template <class T>
struct ScalarFn {  // x (op) s, or s (op) x
  BinaryOp op;
  T s;
  bool scalar_first;
  __device__ T operator()(T x) const { return scalar_first ? apply(op, s, x) : apply(op, x, s); }
};

template <class T>
struct AddAlphaFn {
  T alpha;
  __device__ T operator()(T x, T y) const { return static_cast<T>(x + alpha * y); }
};

template <class T>
struct CompareFn {
  CompareOp op;
  __device__ bool operator()(T x, T y) const { return apply(op, x, y); }
};

template <class T>
struct CompareScalarFn {
  CompareOp op;
  double s;
  __device__ bool operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) {
      return apply(op, x, static_cast<T>(s));  // the scalar takes the tensor's dtype
    } else {
      return apply(op, static_cast<double>(x), s);  // integers compare exactly in double
    }
  }
};

template <class T>
struct WhereFn {
  __device__ T operator()(bool c, T u, T v) const { return c ? u : v; }
};

struct CloseFn {
  double rtol, atol;
  __device__ bool operator()(double u, double v) const {
    return u == v || fabs(u - v) <= atol + rtol * fabs(v);
  }
};

// flag stays 1 unless some element of the contiguous bool array is false.
__global__ void all_true_kernel(int64_t n, const bool* values, int* flag) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    if (!values[i]) *flag = 0;  // a benign race: every writer writes 0
  }
}

// True when every element of the bool tensor `t` (on the current device) is true.
bool all_true(const Tensor& t) {
  const Tensor c = contiguous(t);
  const int device = c.device().index;
  Tensor flag = native::empty({1}, kInt32, c.device());
  fill_(flag, 1.0);
  const int64_t n = c.numel();
  if (n > 0) {
    all_true_kernel<<<grid_for(n), kThreads, 0, cuda::current_stream(device)>>>(
        n, dev_ptr<const bool>(c), dev_ptr<int>(flag));
    LS_CUDA_CHECK_LAUNCH();
  }
  Tensor host = native::empty({1}, kInt32, Device::cpu());
  copy_(host, flag);  // waits for the stream
  return host.data_ptr<int32_t>()[0] == 1;
}

Tensor scalar_op(BinaryOp op, const Tensor& a, double s, bool scalar_first) {
  const char* name = binary_op_name(op);
  check_defined(a, name);
  cuda::DeviceGuard guard(a.device());
  const ScalarType dtype = scalar_result_dtype(op, a.dtype(), s);
  const Tensor x = to_dtype(a, dtype);
  Tensor out = native::empty(a.sizes(), dtype, a.device());
  dev_dispatch_compute(dtype, name, [&]<class S, class C>() {
    map1<S, S>(out, x, Widened1<S, ScalarFn<C>>{{op, scalar_as<C>(s), scalar_first}}, name);
  });
  return out;
}

}  // namespace

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_op_name(op);
  check_pair(name, a, b);
  cuda::DeviceGuard guard(a.device());
  const IntList shape = broadcast_shapes(a.sizes(), b.sizes(), name);
  const ScalarType dtype = binary_result_dtype(op, a, b);
  const Tensor x = to_dtype(a, dtype);
  const Tensor y = to_dtype(b, dtype);
  Tensor out = native::empty(shape, dtype, a.device());
  dev_dispatch_compute(dtype, name, [&]<class S, class C>() {
    map2<S, S, S>(out, x, y, Widened2<S, BinaryFn<C>>{{op}}, name);
  });
  return out;
}

void binary_(BinaryOp op, const Tensor& self, const Tensor& other) {
  const std::string name = std::string(binary_op_name(op)) + "_";
  check_pair(name.c_str(), self, other);
  cuda::DeviceGuard guard(self.device());
  check_binary_inplace(op, self, other, name);
  check_writable(self, name.c_str());
  const Tensor y = to_dtype(other, self.dtype());
  dev_dispatch_compute(self.dtype(), name.c_str(), [&]<class S, class C>() {
    map2<S, S, S>(self, self, y, Widened2<S, BinaryFn<C>>{{op}}, name.c_str());
  });
}

Tensor binary_scalar(BinaryOp op, const Tensor& a, double s) {
  return scalar_op(op, a, s, /*scalar_first=*/false);
}

Tensor scalar_binary(BinaryOp op, double s, const Tensor& a) {
  return scalar_op(op, a, s, /*scalar_first=*/true);
}

void binary_scalar_(BinaryOp op, const Tensor& self, double s) {
  const std::string name = std::string(binary_op_name(op)) + "_";
  check_defined(self, name.c_str());
  cuda::DeviceGuard guard(self.device());
  check_scalar_inplace(op, self, s, name);
  check_writable(self, name.c_str());
  dev_dispatch_compute(self.dtype(), name.c_str(), [&]<class S, class C>() {
    map1<S, S>(self, self, Widened1<S, ScalarFn<C>>{{op, scalar_as<C>(s), false}}, name.c_str());
  });
}

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  if (alpha == 1.0) return cuda_native::binary(BinaryOp::Add, a, b);
  check_pair("add", a, b);
  cuda::DeviceGuard guard(a.device());
  const IntList shape = broadcast_shapes(a.sizes(), b.sizes(), "add");
  const ScalarType dtype = add_alpha_dtype(a, b, alpha);
  const Tensor x = to_dtype(a, dtype);
  const Tensor y = to_dtype(b, dtype);
  Tensor out = native::empty(shape, dtype, a.device());
  dev_dispatch_compute(dtype, "add", [&]<class S, class C>() {
    map2<S, S, S>(out, x, y, Widened2<S, AddAlphaFn<C>>{{scalar_as<C>(alpha)}}, "add");
  });
  return out;
}

Tensor compare(CompareOp op, const Tensor& a, const Tensor& b) {
  const char* name = compare_op_name(op);
  check_pair(name, a, b);
  cuda::DeviceGuard guard(a.device());
  const IntList shape = broadcast_shapes(a.sizes(), b.sizes(), name);
  const ScalarType dtype = promote_types(a.dtype(), b.dtype());
  const Tensor x = to_dtype(a, dtype);
  const Tensor y = to_dtype(b, dtype);
  Tensor out = native::empty(shape, kBool, a.device());
  dev_dispatch_compute(dtype, name, [&]<class S, class C>() {
    map2<bool, S, S>(out, x, y, Widened2<S, CompareFn<C>>{{op}}, name);
  });
  return out;
}

Tensor compare_scalar(CompareOp op, const Tensor& a, double s) {
  const char* name = compare_op_name(op);
  check_defined(a, name);
  cuda::DeviceGuard guard(a.device());
  Tensor out = native::empty(a.sizes(), kBool, a.device());
  dev_dispatch_compute(a.dtype(), name, [&]<class S, class C>() {
    map1<bool, S>(out, a, Widened1<S, CompareScalarFn<C>>{{op, s}}, name);
  });
  return out;
}

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  check_defined(condition, "where");
  check_defined(a, "where");
  check_defined(b, "where");
  check_on_device("where", condition.device(), {&condition, &a, &b});
  cuda::DeviceGuard guard(a.device());
  const IntList shape = where_shape(condition, a, b);
  const ScalarType dtype = promote_types(a.dtype(), b.dtype());
  const Tensor x = to_dtype(a, dtype);
  const Tensor y = to_dtype(b, dtype);
  Tensor out = native::empty(shape, dtype, a.device());
  dev_dispatch_compute(dtype, "where", [&]<class S, class C>() {
    map3<S, bool, S, S>(out, condition, x, y, WidenedWhere<S, WhereFn<C>>{{}}, "where");
  });
  return out;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  check_pair("allclose", a, b);
  cuda::DeviceGuard guard(a.device());
  const IntList shape = broadcast_shapes(a.sizes(), b.sizes(), "allclose");
  Tensor close = native::empty(shape, kBool, a.device());
  map2<bool, double, double>(close, to_dtype(a, kFloat64), to_dtype(b, kFloat64),
                             CloseFn{rtol, atol}, "allclose");
  return all_true(close);
}

bool equal(const Tensor& a, const Tensor& b) {
  check_pair("equal", a, b);
  if (a.sizes() != b.sizes()) return false;
  cuda::DeviceGuard guard(a.device());
  return all_true(cuda_native::compare(CompareOp::Eq, a, b));
}

}  // namespace lockstep::cuda_native
