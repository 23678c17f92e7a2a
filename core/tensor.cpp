// core/tensor.cpp — Tensor metadata, element access and autograd state accessors.
// The ops are elsewhere: see Note [Where ops live] in core/tensor.h.
// Read before: core/tensor.h.
#include "core/tensor.h"

#include "core/autograd_meta.h"
#include "core/native/native.h"
#include "core/shape.h"

namespace lockstep {

namespace detail {

void check_defined(const Tensor& t, const char* op) {
  LS_CHECK(t.defined(), op, ": called on an undefined tensor (default-constructed, or a grad "
                            "that no backward has written yet)");
}

void check_dtype_matches(const Tensor& t, ScalarType expected, const char* op) {
  LS_CHECK(t.dtype() == expected, op, ": tensor has dtype ", t.dtype(), " but ",
           dtype_name(expected), " was requested");
}

std::vector<int64_t> element_offsets(const Tensor& t) {
  std::vector<int64_t> offsets;
  offsets.reserve(static_cast<size_t>(t.numel()));
  for_each_offset(t.sizes(), {t.strides()}, [&](const int64_t* off) {
    offsets.push_back(t.storage_offset() + off[0]);
  });
  return offsets;
}

Tensor to_host(const Tensor& t) { return native::to_device(t, Device::cpu()); }

}  // namespace detail

namespace {
AutogradMeta& meta_of(TensorImpl* impl) {
  if (!impl->autograd_meta) impl->autograd_meta = std::make_unique<AutogradMeta>();
  return *impl->autograd_meta;
}
const Tensor& undefined_tensor() {
  static const Tensor undefined;
  return undefined;
}
}  // namespace

const IntList& Tensor::sizes() const {
  detail::check_defined(*this, "sizes");
  return impl_->sizes;
}

int64_t Tensor::size(int64_t d) const { return sizes()[wrap_dim(d, dim(), "size")]; }

const IntList& Tensor::strides() const {
  detail::check_defined(*this, "strides");
  return impl_->strides;
}

int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "stride")]; }
int64_t Tensor::dim() const { return static_cast<int64_t>(sizes().size()); }
int64_t Tensor::numel() const { return numel_of(sizes()); }

int64_t Tensor::storage_offset() const {
  detail::check_defined(*this, "storage_offset");
  return impl_->offset;
}

void Tensor::bump_version() const {
  detail::check_defined(*this, "bump_version");
  impl_->storage->bump_version();
}

ScalarType Tensor::dtype() const {
  detail::check_defined(*this, "dtype");
  return impl_->dtype;
}

Device Tensor::device() const {
  detail::check_defined(*this, "device");
  return impl_->storage->device();
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    int64_t s = impl_->sizes[d];
    if (s == 1) continue;
    if (impl_->strides[d] != expected) return false;
    expected *= s;
  }
  return true;
}

size_t Tensor::element_size() const { return lockstep::element_size(dtype()); }
size_t Tensor::nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
std::string Tensor::shape_str() const { return defined() ? lockstep::shape_str(sizes()) : "undefined"; }

void* Tensor::raw_data() const {
  detail::check_defined(*this, "data_ptr");
  return static_cast<char*>(impl_->storage->data()) + impl_->offset * element_size();
}

bool Tensor::requires_grad() const {
  return defined() && impl_->autograd_meta && impl_->autograd_meta->requires_grad;
}

Tensor& Tensor::requires_grad_(bool requires_grad) {
  detail::check_defined(*this, "requires_grad_");
  LS_CHECK(is_leaf(), "requires_grad_: only leaf tensors (not produced by an op) can change "
                      "requires_grad; call .detach() first to make a new leaf");
  LS_CHECK(!requires_grad || is_floating_point(),
           "requires_grad_: only floating point tensors can require gradients, got ", dtype());
  meta_of(impl_.get()).requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const {
  return !defined() || !impl_->autograd_meta || impl_->autograd_meta->grad_fn == nullptr;
}

const Tensor& Tensor::grad() const {
  if (!defined() || !impl_->autograd_meta) return undefined_tensor();
  return impl_->autograd_meta->grad;
}

Tensor& Tensor::mutable_grad() {
  detail::check_defined(*this, "mutable_grad");
  return meta_of(impl_.get()).grad;
}

void Tensor::set_grad(const Tensor& grad) const {
  detail::check_defined(*this, "set_grad");
  if (grad.defined()) {
    LS_CHECK(grad.sizes() == sizes() && grad.dtype() == dtype(), "set_grad: gradient of shape ",
             grad.shape_str(), " and dtype ", grad.dtype(), " does not match tensor of shape ",
             shape_str(), " and dtype ", dtype());
  }
  meta_of(impl_.get()).grad = grad;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  if (!defined() || !impl_->autograd_meta) return none;
  return impl_->autograd_meta->grad_fn;
}

uint32_t Tensor::output_nr() const {
  return defined() && impl_->autograd_meta ? impl_->autograd_meta->output_nr : 0;
}

Tensor Tensor::detach() const {
  detail::check_defined(*this, "detach");
  return Tensor(std::make_shared<TensorImpl>(impl_->storage, impl_->sizes, impl_->strides,
                                             impl_->offset, impl_->dtype));
}

}  // namespace lockstep
