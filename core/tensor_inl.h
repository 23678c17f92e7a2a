// core/tensor_inl.h — template members of Tensor (element access).
// Read before: core/tensor.h.
#pragma once

namespace lockstep {

namespace detail {
void check_defined(const Tensor& t, const char* op);
void check_dtype_matches(const Tensor& t, ScalarType expected, const char* op);
// Logical (row-major) element order -> element offsets into the storage.
std::vector<int64_t> element_offsets(const Tensor& t);
// A CPU copy of a tensor on another device (item, to_vector and printing read
// device tensors through it: the host never dereferences device memory).
Tensor to_host(const Tensor& t);
}  // namespace detail

template <class T>
T* Tensor::data_ptr() const {
  detail::check_defined(*this, "data_ptr");
  detail::check_dtype_matches(*this, dtype_of<T>(), "data_ptr");
  return static_cast<T*>(raw_data());
}

template <class T>
T Tensor::item() const {
  detail::check_defined(*this, "item");
  LS_CHECK(numel() == 1, "item: expected a tensor with one element but got shape ", shape_str(),
           "; reduce it first (e.g. .sum()) or index it");
  if (!device().is_cpu()) return detail::to_host(*this).item<T>();
  return dispatch_all(dtype(), [&]<class S>() {
    return convert<T>(static_cast<S*>(impl_->storage->data())[impl_->offset]);
  });
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  detail::check_defined(*this, "to_vector");
  if (!device().is_cpu()) return detail::to_host(*this).to_vector<T>();
  std::vector<T> out;
  out.reserve(static_cast<size_t>(numel()));
  std::vector<int64_t> offsets = detail::element_offsets(*this);
  dispatch_all(dtype(), [&]<class S>() {
    const S* base = static_cast<const S*>(impl_->storage->data());
    for (int64_t off : offsets) out.push_back(convert<T>(base[off]));
  });
  return out;
}

}  // namespace lockstep
