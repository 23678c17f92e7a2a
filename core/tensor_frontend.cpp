// core/tensor_frontend.cpp — the Tensor methods that exist for libtorch's
// spellings: untyped item(), new_zeros/new_ones/new_full/new_empty, uniform_ and
// normal_, and the const forms of the in-place ops (a Tensor is a handle, so
// libtorch declares them const and `p.grad().zero_()` compiles there).
// The const forms forward to the non-const ones in core/tensor_methods.cpp:
// same checks (Note [In-place ops and autograd]), same version bump.
// Read before: core/tensor_methods.cpp, core/factory.h. Read next: core/rng_state.h.
#include "core/factory.h"
#include "core/native/native.h"
#include "core/tensor.h"

namespace lockstep {

double Tensor::item() const { return item<double>(); }

namespace {
TensorOptions like(const Tensor& t, const char* op) {
  detail::check_defined(t, op);
  return TensorOptions().dtype(t.dtype()).device(t.device());
}
Tensor& mutable_handle(const Tensor& t) { return const_cast<Tensor&>(t); }  // a handle: the data is shared
}  // namespace

Tensor Tensor::new_zeros(const IntList& sizes) const { return zeros(sizes, like(*this, "new_zeros")); }
Tensor Tensor::new_ones(const IntList& sizes) const { return ones(sizes, like(*this, "new_ones")); }
Tensor Tensor::new_full(const IntList& sizes, double value) const {
  return full(sizes, value, like(*this, "new_full"));
}
Tensor Tensor::new_empty(const IntList& sizes) const { return empty(sizes, like(*this, "new_empty")); }

// Drawn on the host from the default generator (the factories' stream, so a seed
// gives the same numbers on every device), then copied in: the version bumps once.
Tensor& Tensor::uniform_(double from, double to) {
  LS_CHECK(defined() && is_floating_point(), "uniform_: needs a defined floating point tensor, got ",
           defined() ? dtype_name(dtype()) : "an undefined tensor");
  return copy_(uniform(sizes(), from, to, TensorOptions().dtype(kFloat64)));
}

Tensor& Tensor::normal_(double mean, double std) {
  LS_CHECK(defined() && is_floating_point(), "normal_: needs a defined floating point tensor, got ",
           defined() ? dtype_name(dtype()) : "an undefined tensor");
  LS_CHECK(std >= 0.0, "normal_: std must be >= 0 but got ", std);
  Tensor z = randn(sizes(), TensorOptions().dtype(kFloat64));  // (sizes)
  native::binary_scalar_(native::BinaryOp::Mul, z, std);
  native::binary_scalar_(native::BinaryOp::Add, z, mean);
  return copy_(z);
}

const Tensor& Tensor::zero_() const { return mutable_handle(*this).zero_(); }
const Tensor& Tensor::fill_(double value) const { return mutable_handle(*this).fill_(value); }
const Tensor& Tensor::copy_(const Tensor& src) const { return mutable_handle(*this).copy_(src); }
const Tensor& Tensor::add_(const Tensor& other, double alpha) const {
  return mutable_handle(*this).add_(other, alpha);
}
const Tensor& Tensor::add_(double other) const { return mutable_handle(*this).add_(other); }
const Tensor& Tensor::sub_(const Tensor& other, double alpha) const {
  return mutable_handle(*this).sub_(other, alpha);
}
const Tensor& Tensor::mul_(const Tensor& other) const { return mutable_handle(*this).mul_(other); }
const Tensor& Tensor::mul_(double other) const { return mutable_handle(*this).mul_(other); }
const Tensor& Tensor::div_(const Tensor& other) const { return mutable_handle(*this).div_(other); }
const Tensor& Tensor::div_(double other) const { return mutable_handle(*this).div_(other); }
const Tensor& Tensor::uniform_(double from, double to) const {
  return mutable_handle(*this).uniform_(from, to);
}
const Tensor& Tensor::normal_(double mean, double std) const {
  return mutable_handle(*this).normal_(mean, std);
}

}  // namespace lockstep
