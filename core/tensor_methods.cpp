// core/tensor_methods.cpp — the Tensor methods autograd never records:
// comparisons, argmax/argmin, whole-tensor checks and in-place updates.
//
// § Note [In-place ops and autograd]
// lockstep's tape does not rewrite history for in-place ops. An in-place op on
// a tensor that requires grad while grad mode is on is therefore refused with
// an error (for a leaf such as a parameter: do the update under
// ls::NoGradGuard, as optimizers do; otherwise use the out-of-place op). Every
// in-place op bumps the storage's version counter, so a tensor that an op saved
// for backward and that is modified later is caught when backward runs (see
// Note [Saved tensor versions] in autograd/saved_variable.h).
// Read before: core/tensor.h, core/native/native.h.
#include "core/grad_mode.h"
#include "core/native/native.h"
#include "core/tensor.h"

namespace lockstep {

using native::BinaryOp;
using native::CompareOp;

namespace {
// See Note [In-place ops and autograd].
void check_inplace(const Tensor& self, const char* op) {
  detail::check_defined(self, op);
  if (!self.requires_grad() || !GradMode::is_enabled()) return;
  LS_CHECK(!self.is_leaf(), op, ": a leaf tensor of shape ", self.shape_str(),
           " that requires grad (e.g. a parameter) is used in an in-place operation; wrap the "
           "update in `ls::NoGradGuard no_grad;` (as optimizers do) or use the out-of-place op");
  throw Error(detail::str(op, ": in-place operation on a tensor of shape ", self.shape_str(),
                          " that is part of the autograd graph; lockstep's autograd does not "
                          "record in-place ops, use the out-of-place form instead"));
}

Tensor& bumped(Tensor& self) {
  self.impl()->storage->bump_version();
  return self;
}
}  // namespace

Tensor Tensor::eq(const Tensor& o) const { return native::compare(CompareOp::Eq, *this, o); }
Tensor Tensor::ne(const Tensor& o) const { return native::compare(CompareOp::Ne, *this, o); }
Tensor Tensor::lt(const Tensor& o) const { return native::compare(CompareOp::Lt, *this, o); }
Tensor Tensor::le(const Tensor& o) const { return native::compare(CompareOp::Le, *this, o); }
Tensor Tensor::gt(const Tensor& o) const { return native::compare(CompareOp::Gt, *this, o); }
Tensor Tensor::ge(const Tensor& o) const { return native::compare(CompareOp::Ge, *this, o); }
Tensor Tensor::eq(double o) const { return native::compare_scalar(CompareOp::Eq, *this, o); }
Tensor Tensor::ne(double o) const { return native::compare_scalar(CompareOp::Ne, *this, o); }
Tensor Tensor::lt(double o) const { return native::compare_scalar(CompareOp::Lt, *this, o); }
Tensor Tensor::le(double o) const { return native::compare_scalar(CompareOp::Le, *this, o); }
Tensor Tensor::gt(double o) const { return native::compare_scalar(CompareOp::Gt, *this, o); }
Tensor Tensor::ge(double o) const { return native::compare_scalar(CompareOp::Ge, *this, o); }

Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return native::argmax(*this, dim, keepdim); }
Tensor Tensor::argmin(int64_t dim, bool keepdim) const { return native::argmin(*this, dim, keepdim); }

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  return native::allclose(a, b, rtol, atol);
}
bool equal(const Tensor& a, const Tensor& b) { return native::equal(a, b); }

Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::fill_(double value) {
  check_inplace(*this, "fill_");
  native::fill_(*this, value);
  return bumped(*this);
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace(*this, "copy_");
  detail::check_defined(src, "copy_");
  native::copy_(*this, src);
  return bumped(*this);
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_inplace(*this, "add_");
  if (alpha == 1.0) {
    native::binary_(BinaryOp::Add, *this, other);
  } else {
    native::binary_(BinaryOp::Add, *this, native::binary_scalar(BinaryOp::Mul, other, alpha));
  }
  return bumped(*this);
}

Tensor& Tensor::add_(double other) {
  check_inplace(*this, "add_");
  native::binary_scalar_(BinaryOp::Add, *this, other);
  return bumped(*this);
}

Tensor& Tensor::sub_(const Tensor& other, double alpha) { return add_(other, -alpha); }

Tensor& Tensor::mul_(const Tensor& other) {
  check_inplace(*this, "mul_");
  native::binary_(BinaryOp::Mul, *this, other);
  return bumped(*this);
}

Tensor& Tensor::mul_(double other) {
  check_inplace(*this, "mul_");
  native::binary_scalar_(BinaryOp::Mul, *this, other);
  return bumped(*this);
}

Tensor& Tensor::div_(const Tensor& other) {
  check_inplace(*this, "div_");
  native::binary_(BinaryOp::Div, *this, other);
  return bumped(*this);
}

Tensor& Tensor::div_(double other) {
  check_inplace(*this, "div_");
  native::binary_scalar_(BinaryOp::Div, *this, other);
  return bumped(*this);
}

}  // namespace lockstep
