// core/factory.cpp — tensor factories. On a CUDA device, empty/zeros/ones/full/eye
// are made there directly; the others are computed on the host and copied
// (see make_on_host).
// Read before: core/factory.h.
#include "core/factory.h"

#include <cstring>

#include "core/cuda_hooks.h"
#include "core/native/native.h"
#include "core/rng.h"
#include "core/shape.h"

namespace lockstep {

namespace {
Tensor finish(Tensor t, const TensorOptions& options) {
  if (options.requires_grad()) t.requires_grad_(true);
  return t;
}

void check_device(const Device& device) {
  if (device.is_cpu()) return;
  if (detail::cuda_hooks_or_null<CudaRuntimeHooks>() == nullptr) {
    throw Error(detail::cuda_library_missing("factory: device " + device.str()));
  }
  LS_CHECK(device.index >= 0 && device.index < cuda::device_count(), "factory: device ",
           device.str(), " does not exist: ", cuda::device_count(),
           " CUDA device(s) are visible; use ls::Device::cpu() or a valid cuda index");
}

// An uninitialised tensor on options' device.
Tensor make(const IntList& sizes, const TensorOptions& options, ScalarType default_dtype) {
  check_device(options.device());
  return native::empty(sizes, options.has_dtype() ? options.dtype() : default_dtype,
                       options.device());
}

// Factories whose values are computed on the host (random numbers, arange,
// literal values) build the tensor on the CPU and then copy it to options'
// device: randn on CUDA draws from the same CPU generator, so a seed gives the
// same numbers on every device.
Tensor make_on_host(const IntList& sizes, const TensorOptions& options, ScalarType default_dtype) {
  check_device(options.device());
  return make(sizes, options.device(Device::cpu()), default_dtype);
}

Tensor place(Tensor t, const TensorOptions& options) {
  if (options.device() == t.device()) return t;
  Tensor out = native::empty(t.sizes(), t.dtype(), options.device());
  native::copy_(out, t);
  return out;
}

// Fills t (contiguous) element by element with draw() under the generator's lock.
template <class Draw>
Tensor fill_random(Tensor t, Draw draw) {
  Generator& gen = default_generator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  dispatch(t.dtype(), "random factory", [&]<class T>() {
    T* p = t.data_ptr<T>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = convert<T>(draw(gen));
  });
  return t;
}
}  // namespace

Tensor empty(const IntList& sizes, const TensorOptions& options) {
  return finish(make(sizes, options, kFloat32), options);
}

Tensor zeros(const IntList& sizes, const TensorOptions& options) {
  return full(sizes, 0.0, options);
}

Tensor ones(const IntList& sizes, const TensorOptions& options) { return full(sizes, 1.0, options); }

Tensor full(const IntList& sizes, double value, const TensorOptions& options) {
  Tensor t = make(sizes, options, kFloat32);
  if (value == 0.0 && t.device().is_cpu()) {
    if (t.nbytes() > 0) std::memset(t.raw_data(), 0, t.nbytes());
  } else {
    native::fill_(t, value);
  }
  return finish(t, options);
}

// The result stays on t's device unless options name another (non-CPU) device.
Tensor zeros_like(const Tensor& t, const TensorOptions& options) {
  TensorOptions o = options.has_dtype() ? options : options.dtype(t.dtype());
  if (o.device().is_cpu()) o = o.device(t.device());
  return zeros(t.sizes(), o);
}
Tensor zeros_like(const Tensor& t) { return native::zeros_like(t); }
Tensor ones_like(const Tensor& t) {
  return ones(t.sizes(), TensorOptions().dtype(t.dtype()).device(t.device()));
}
Tensor empty_like(const Tensor& t) { return native::empty_like(t); }

Tensor arange(int64_t end, const TensorOptions& options) { return arange(0, end, 1, options); }

Tensor arange(int64_t start, int64_t end, int64_t step, const TensorOptions& options) {
  LS_CHECK(step != 0, "arange: step must be non-zero");
  int64_t n = step > 0 ? (end - start + step - 1) / step : (start - end - step - 1) / -step;
  if (n < 0) n = 0;
  Tensor t = make_on_host({n}, options, kInt64);
  dispatch(t.dtype(), "arange", [&]<class T>() {
    T* p = t.data_ptr<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = convert<T>(start + i * step);
  });
  return finish(place(t, options), options);
}

Tensor eye(int64_t n, const TensorOptions& options) {
  Tensor t = make({n, n}, options, kFloat32);
  native::fill_(t, 0.0);
  native::fill_(native::as_strided(t, {n}, {n + 1}, 0), 1.0);
  return finish(t, options);
}

template <class T>
Tensor tensor(const std::vector<T>& values, const IntList& sizes, const TensorOptions& options) {
  IntList shape = sizes.empty() ? IntList{static_cast<int64_t>(values.size())} : sizes;
  LS_CHECK(numel_of(shape) == static_cast<int64_t>(values.size()), "tensor: shape ",
           shape_str(shape), " holds ", numel_of(shape), " elements but ", values.size(),
           " values were given");
  Tensor src = native::empty(shape, dtype_of<T>());
  if (!values.empty()) std::memcpy(src.raw_data(), values.data(), values.size() * sizeof(T));
  check_device(options.device());
  Tensor out = options.has_dtype() ? native::to_dtype(src, options.dtype()) : src;
  return finish(place(out, options), options);
}

template Tensor tensor<float>(const std::vector<float>&, const IntList&, const TensorOptions&);
template Tensor tensor<double>(const std::vector<double>&, const IntList&, const TensorOptions&);
template Tensor tensor<int64_t>(const std::vector<int64_t>&, const IntList&, const TensorOptions&);
template Tensor tensor<int32_t>(const std::vector<int32_t>&, const IntList&, const TensorOptions&);
template Tensor tensor<uint8_t>(const std::vector<uint8_t>&, const IntList&, const TensorOptions&);

Tensor scalar_tensor(double value, const TensorOptions& options) {
  return full({}, value, options);
}

Tensor randn(const IntList& sizes, const TensorOptions& options) {
  Tensor t = make_on_host(sizes, options, kFloat32);
  LS_CHECK(t.is_floating_point(), "randn: needs a floating point dtype, got ", t.dtype());
  return finish(place(fill_random(t, [](Generator& g) { return g.normal(); }), options), options);
}

Tensor rand(const IntList& sizes, const TensorOptions& options) {
  return uniform(sizes, 0.0, 1.0, options);
}

Tensor uniform(const IntList& sizes, double low, double high, const TensorOptions& options) {
  LS_CHECK(low <= high, "uniform: low (", low, ") must not exceed high (", high, ")");
  Tensor t = make_on_host(sizes, options, kFloat32);
  LS_CHECK(t.is_floating_point(), "uniform: needs a floating point dtype, got ", t.dtype());
  return finish(
      place(fill_random(t, [&](Generator& g) { return low + (high - low) * g.uniform(); }), options),
      options);
}

Tensor randint(int64_t low, int64_t high, const IntList& sizes, const TensorOptions& options) {
  LS_CHECK(low < high, "randint: low (", low, ") must be less than high (", high, ")");
  const uint64_t range = static_cast<uint64_t>(high - low);
  Tensor t = fill_random(make_on_host(sizes, options, kInt64), [&](Generator& g) {
    return static_cast<double>(low + static_cast<int64_t>(g.next_u64() % range));
  });
  return finish(place(t, options), options);
}

Tensor bernoulli(const IntList& sizes, double p, const TensorOptions& options) {
  LS_CHECK(p >= 0.0 && p <= 1.0, "bernoulli: p must be in [0, 1], got ", p);
  Tensor t = fill_random(make_on_host(sizes, options, kFloat32),
                         [&](Generator& g) { return g.uniform() < p ? 1.0 : 0.0; });
  return finish(place(t, options), options);
}

Tensor randn_like(const Tensor& t) {
  return randn(t.sizes(), TensorOptions().dtype(t.dtype()).device(t.device()));
}

Tensor randperm(int64_t n) {
  Tensor t = arange(n);
  int64_t* p = t.data_ptr<int64_t>();
  Generator& gen = default_generator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates
    int64_t j = static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(i + 1));
    std::swap(p[i], p[j]);
  }
  return t;
}

}  // namespace lockstep
