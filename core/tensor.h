// core/tensor.h — Tensor, the handle users hold.
//
// A Tensor is a shared pointer to a TensorImpl: copying a Tensor copies the
// handle, not the data (like torch.Tensor and at::Tensor). Methods come in
// three groups (see Note [Where ops live]):
//   - metadata and element access, defined in core/tensor.cpp;
//   - differentiable ops (a + b, a.relu(), a.view(...)), declared here and
//     defined in autograd/functions/*.cpp, which run the kernels in
//     core/native/ and record a Node on the tape when a input requires grad;
//   - in-place ops (zero_, add_, ...), which autograd does not record.
//
// § Note [Where ops live]
// core/native/ holds the kernels (`ls::native::add`, ...): pure functions of
// tensors, no autograd. autograd/functions/ defines the public ops users call;
// each runs a native kernel and, when grad mode is on and an input requires
// grad, records a backward Node. Code inside core/ calls native:: only, so the
// core library never depends on autograd (the layering in docs/design.md).
// Read before: core/tensor_impl.h. Read next: core/shape.h, core/native/native.h, autograd/node.h;
// on README's DDP track, autograd/accumulate_grad.h.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <limits>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor_impl.h"

namespace lockstep {

namespace autograd {
class Node;
class HookHandle;
}  // namespace autograd

using IntList = std::vector<int64_t>;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata (core/tensor.cpp) ----
  bool defined() const { return impl_ != nullptr; }
  const IntList& sizes() const;
  int64_t size(int64_t dim) const;  // negative dims count from the end
  const IntList& strides() const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const;
  int64_t numel() const;
  int64_t storage_offset() const;
  ScalarType dtype() const;
  ScalarType scalar_type() const { return dtype(); }
  Device device() const;
  bool is_contiguous() const;
  size_t element_size() const;
  size_t nbytes() const;  // numel() * element_size()
  bool is_floating_point() const { return lockstep::is_floating_point(dtype()); }
  std::string shape_str() const;  // "[2, 3]", for error messages

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // Pointer to the first element. Checks that T matches dtype().
  template <class T>
  T* data_ptr() const;
  void* raw_data() const;
  // The value of a one-element tensor, converted to T.
  template <class T>
  T item() const;
  double item() const;  // untyped, as a double (libtorch's item() returns a Scalar)
  // All elements in logical (row-major) order, converted to T.
  template <class T>
  std::vector<T> to_vector() const;

  // ---- autograd state (core/tensor.cpp; backward and hooks in autograd/) ----
  bool requires_grad() const;
  Tensor& requires_grad_(bool requires_grad = true);  // leaves only
  bool is_leaf() const;                               // no grad_fn
  const Tensor& grad() const;                         // undefined until a backward reaches it
  Tensor& mutable_grad();
  void set_grad(const Tensor& grad) const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  uint32_t output_nr() const;
  // Runs backward from this tensor. `grad` defaults to 1 for one-element tensors.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  // Registers fn(param) to run after a backward has accumulated into param.grad().
  autograd::HookHandle register_post_accumulate_grad_hook(std::function<void(Tensor&)> fn) const;
  Tensor detach() const;  // same storage, no autograd history
  // Counts an in-place write the ops did not see (a collective, an optimizer's
  // raw loop) on the storage's version, so saved tensors notice it
  // (Note [Saved tensor versions] in autograd/saved_variable.h).
  void bump_version() const;

  // ---- conversions (differentiable) ----
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(ScalarType dtype) const;
  Tensor to(Device device) const;

  // ---- views and shape ops (differentiable) ----
  Tensor reshape(const IntList& sizes) const;  // one size may be -1
  Tensor view(const IntList& sizes) const;     // needs compatible strides
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // transpose of a 2-d tensor
  Tensor permute(const IntList& dims) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const IntList& sizes) const;  // -1 keeps a size
  Tensor index_select(int64_t dim, const Tensor& index) const;
  // ---- libtorch's indexing spellings (autograd/functions/indexing_extra.cpp) ----
  Tensor operator[](int64_t index) const;  // select(0, index)
  // Elements [start, end) of dim with a step, Python's slice clamping; a view for
  // step 1 (narrow), a copy (index_select) for step > 1.
  Tensor slice(int64_t dim = 0, int64_t start = 0,
               int64_t end = std::numeric_limits<int64_t>::max(), int64_t step = 1) const;
  Tensor gather(int64_t dim, const Tensor& index) const;  // out[i][j] = self[index[i][j]][j] (dim 0)
  // A copy of self with self[index[i][j]][j] = src[i][j] (dim 0); differentiable in self and src.
  Tensor scatter(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor masked_fill(const Tensor& mask, double value) const;  // value where mask (bool) is true
  Tensor tril(int64_t diagonal = 0) const;  // zero above the diagonal (last two dims)
  Tensor triu(int64_t diagonal = 0) const;  // zero below the diagonal
  // New tensors with self's dtype and device (not its requires_grad).
  Tensor new_zeros(const IntList& sizes) const;
  Tensor new_ones(const IntList& sizes) const;
  Tensor new_full(const IntList& sizes, double value) const;
  Tensor new_empty(const IntList& sizes) const;

  // ---- math (differentiable) ----
  Tensor matmul(const Tensor& other) const;
  Tensor sum() const;
  Tensor sum(const IntList& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const IntList& dims, bool keepdim = false) const;
  Tensor max() const;  // over all elements
  std::tuple<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;  // values, indices
  Tensor min() const;
  std::tuple<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;  // int64, not differentiable
  Tensor argmin(int64_t dim, bool keepdim = false) const;
  Tensor neg() const;
  Tensor relu() const;
  Tensor gelu() const;  // erf form, like PyTorch's default
  Tensor exp() const;
  Tensor log() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor abs() const;
  Tensor pow(double exponent) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;

  // ---- comparisons (bool results, not differentiable) ----
  Tensor eq(const Tensor& other) const;
  Tensor ne(const Tensor& other) const;
  Tensor lt(const Tensor& other) const;
  Tensor le(const Tensor& other) const;
  Tensor gt(const Tensor& other) const;
  Tensor ge(const Tensor& other) const;
  Tensor eq(double other) const;
  Tensor ne(double other) const;
  Tensor lt(double other) const;
  Tensor le(double other) const;
  Tensor gt(double other) const;
  Tensor ge(double other) const;

  // ---- in place (not recorded by autograd; see Note [In-place ops and autograd]) ----
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);  // broadcasts src, converts dtype
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& add_(double other);
  Tensor& sub_(const Tensor& other, double alpha = 1.0);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double other);
  Tensor& div_(const Tensor& other);
  Tensor& div_(double other);
  // Fill from the default Generator (core/rng.h), floating dtypes only.
  Tensor& uniform_(double from = 0.0, double to = 1.0);
  Tensor& normal_(double mean = 0.0, double std = 1.0);
  // libtorch's in-place methods are const (a Tensor is a handle), so they work on
  // p.grad(), which is a const Tensor&; these forward to the ones above.
  const Tensor& zero_() const;
  const Tensor& fill_(double value) const;
  const Tensor& copy_(const Tensor& src) const;
  const Tensor& add_(const Tensor& other, double alpha = 1.0) const;
  const Tensor& add_(double other) const;
  const Tensor& sub_(const Tensor& other, double alpha = 1.0) const;
  const Tensor& mul_(const Tensor& other) const;
  const Tensor& mul_(double other) const;
  const Tensor& div_(const Tensor& other) const;
  const Tensor& div_(double other) const;
  const Tensor& uniform_(double from = 0.0, double to = 1.0) const;
  const Tensor& normal_(double mean = 0.0, double std = 1.0) const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// ---- arithmetic operators (differentiable, NumPy broadcasting) ----
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& a);

// § Note [Scalar type promotion]
// A C++ scalar keeps its category, as a Python number does in PyTorch: a floating
// scalar (double, float) is a "float" operand and an integral one (int, int64_t,
// bool...) an "integer" one, whatever its value. The overloads on double above
// are the floating ones; these templates catch every integral type exactly, so
// `x * 2` and `x * 2.0` differ as in PyTorch (table in docs/api.md):
//   integer tensor (op) floating scalar  -> float32 (the default float dtype)
//   integer tensor (op) integer scalar   -> the tensor's dtype (bool -> int64); / is float32
//   floating tensor (op) any scalar      -> the tensor's dtype
// Tensor-tensor ops follow result_type() below.
namespace detail {
enum class ScalarOp { Add, Sub, Mul, Div, RSub, RDiv };
Tensor integer_scalar_op(ScalarOp op, const Tensor& a, int64_t s);  // elementwise.cpp
}  // namespace detail
template <std::integral I>
Tensor operator+(const Tensor& a, I b) { return detail::integer_scalar_op(detail::ScalarOp::Add, a, static_cast<int64_t>(b)); }
template <std::integral I>
Tensor operator-(const Tensor& a, I b) { return detail::integer_scalar_op(detail::ScalarOp::Sub, a, static_cast<int64_t>(b)); }
template <std::integral I>
Tensor operator*(const Tensor& a, I b) { return detail::integer_scalar_op(detail::ScalarOp::Mul, a, static_cast<int64_t>(b)); }
template <std::integral I>
Tensor operator/(const Tensor& a, I b) { return detail::integer_scalar_op(detail::ScalarOp::Div, a, static_cast<int64_t>(b)); }
template <std::integral I>
Tensor operator+(I a, const Tensor& b) { return detail::integer_scalar_op(detail::ScalarOp::Add, b, static_cast<int64_t>(a)); }
template <std::integral I>
Tensor operator-(I a, const Tensor& b) { return detail::integer_scalar_op(detail::ScalarOp::RSub, b, static_cast<int64_t>(a)); }
template <std::integral I>
Tensor operator*(I a, const Tensor& b) { return detail::integer_scalar_op(detail::ScalarOp::Mul, b, static_cast<int64_t>(a)); }
template <std::integral I>
Tensor operator/(I a, const Tensor& b) { return detail::integer_scalar_op(detail::ScalarOp::RDiv, b, static_cast<int64_t>(a)); }

// PyTorch's result_type: the dtype a (op) b computes in. Categories rank
// bool < integer < floating; a dimensioned operand decides within its category,
// a 0-d operand only when its category is higher (core/type_promotion.cpp).
ScalarType result_type(const Tensor& a, const Tensor& b);

// ---- free functions (differentiable unless noted) ----
Tensor matmul(const Tensor& a, const Tensor& b);  // 1-d, 2-d and batched (broadcast batch dims)
Tensor bmm(const Tensor& a, const Tensor& b);     // (B, n, k) x (B, k, m)
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// Not differentiable: comparisons of whole tensors.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
bool equal(const Tensor& a, const Tensor& b);  // same shape and elements

std::ostream& operator<<(std::ostream& os, const Tensor& t);  // core/printing.cpp

}  // namespace lockstep

#include "core/tensor_inl.h"
