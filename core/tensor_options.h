// core/tensor_options.h — dtype, device and requires_grad for factories, with
// fluent setters like libtorch: TensorOptions().dtype(kFloat64).requires_grad(true).
// Read before: core/tensor.h. Read next: core/factory.h.
#pragma once

#include "core/device.h"
#include "core/dtype.h"

namespace lockstep {

class TensorOptions {
 public:
  TensorOptions() = default;
  TensorOptions(ScalarType dtype) : dtype_(dtype), has_dtype_(true) {}  // NOLINT: implicit
  TensorOptions(Device device) : device_(device) {}                     // NOLINT: implicit

  TensorOptions dtype(ScalarType d) const {
    TensorOptions o = *this;
    o.dtype_ = d;
    o.has_dtype_ = true;
    return o;
  }
  TensorOptions device(Device d) const {
    TensorOptions o = *this;
    o.device_ = d;
    return o;
  }
  TensorOptions requires_grad(bool r) const {
    TensorOptions o = *this;
    o.requires_grad_ = r;
    return o;
  }

  ScalarType dtype() const { return dtype_; }
  bool has_dtype() const { return has_dtype_; }
  Device device() const { return device_; }
  bool requires_grad() const { return requires_grad_; }

 private:
  ScalarType dtype_ = kFloat32;
  bool has_dtype_ = false;
  Device device_ = Device::cpu();
  bool requires_grad_ = false;
};

// ls::requires_grad(): shorthand for TensorOptions().requires_grad(true).
inline TensorOptions requires_grad(bool r = true) { return TensorOptions().requires_grad(r); }
inline TensorOptions dtype(ScalarType d) { return TensorOptions().dtype(d); }
inline TensorOptions device(Device d) { return TensorOptions().device(d); }

}  // namespace lockstep
