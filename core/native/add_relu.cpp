// core/native/add_relu.cpp — max(a + b, 0) in one pass: the residual add and
// ReLU at the end of every ResNet block (see core/native/fused_relu.h).
// Read before: core/native/fused_relu.h, core/native/elementwise_loop.h.
// Read next: autograd/functions/add_relu.cpp.
#include <algorithm>

#include "core/native/elementwise_loop.h"
#include "core/native/fused_relu.h"
#include "core/native/native.h"

namespace lockstep::native {

Tensor add_relu(const Tensor& a, const Tensor& b) {
  const char* op = "add_relu";
  lockstep::detail::check_defined(a, op);
  lockstep::detail::check_defined(b, op);
  LS_CHECK(a.sizes() == b.sizes() && a.dtype() == b.dtype(), op,
           ": expected two tensors of the "
           "same shape and dtype but got ",
           a.dtype(), " ", a.shape_str(), " and ", b.dtype(), " ", b.shape_str(),
           "; for broadcasting or mixed dtypes use (a + b).relu()");
  Tensor out = empty(a.sizes(), a.dtype());  // a's shape, contiguous
  dispatch_floating(a.dtype(), op, [&]<class T>() {
    detail::map_elements<T, T, T>(out, {a, b}, [](T x, T y) { return std::max(x + y, T(0)); });
  });
  return out;
}

}  // namespace lockstep::native
