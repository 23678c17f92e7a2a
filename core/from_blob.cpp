// core/from_blob.cpp — from_blob over caller-owned memory, and multinomial.
// Read before: core/from_blob.h.
#include "core/from_blob.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <vector>

#include "core/autograd_meta.h"
#include "core/native/native.h"
#include "core/rng.h"

namespace lockstep {

Tensor from_blob(void* data, const IntList& sizes, const TensorOptions& options) {
  return from_blob(data, sizes, contiguous_strides(sizes), options);
}

namespace {

// from_blob's body; `deleter` (may be empty) frees the memory with the storage.
// The arguments are checked first, so a refused call frees nothing.
Tensor wrap_blob(void* data, const IntList& sizes, const IntList& strides, const TensorOptions& options,
                 std::function<void(void*)> deleter) {
  LS_CHECK(data != nullptr || numel_of(sizes) == 0, "from_blob: data is null");
  LS_CHECK(strides.size() == sizes.size(), "from_blob: ", sizes.size(), " sizes but ", strides.size(),
           " strides");
  LS_CHECK(options.device().is_cpu(), "from_blob: the memory must be on the CPU (got device ",
           options.device(), "); copy it with .to(device) after wrapping it");
  const ScalarType dtype = options.has_dtype() ? options.dtype() : kFloat32;
  int64_t extent = 1;  // elements spanned: 1 + sum (size - 1) * stride
  for (size_t d = 0; d < sizes.size(); ++d) {
    LS_CHECK(sizes[d] >= 0 && strides[d] >= 0, "from_blob: sizes and strides must be >= 0, got size ",
             sizes[d], " and stride ", strides[d], " in dim ", d);
    if (sizes[d] == 0) extent = 0;
    if (extent > 0) extent += (sizes[d] - 1) * strides[d];
  }
  std::shared_ptr<void> owner;  // runs deleter(data) with the last storage
  if (deleter != nullptr) owner = std::shared_ptr<void>(data, std::move(deleter));
  auto storage = std::make_shared<StorageImpl>(data, static_cast<size_t>(extent) * element_size(dtype),
                                               Device::cpu(), std::move(owner));
  Tensor t(std::make_shared<TensorImpl>(std::move(storage), sizes, strides, 0, dtype));
  if (options.requires_grad()) t.requires_grad_(true);
  return t;
}

}  // namespace

Tensor from_blob(void* data, const IntList& sizes, const IntList& strides, const TensorOptions& options) {
  return wrap_blob(data, sizes, strides, options, nullptr);
}

Tensor from_blob(void* data, const IntList& sizes, std::function<void(void*)> deleter,
                 const TensorOptions& options) {
  LS_CHECK(deleter != nullptr, "from_blob: the deleter is empty; leave it out when nothing is to be freed");
  return wrap_blob(data, sizes, contiguous_strides(sizes), options, std::move(deleter));
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement) {
  detail::check_defined(probs, "multinomial");
  LS_CHECK(probs.dim() == 1 || probs.dim() == 2, "multinomial: probs must be (C) or (N, C) but got ",
           probs.shape_str());
  LS_CHECK(num_samples > 0, "multinomial: num_samples must be positive, got ", num_samples);
  const bool batched = probs.dim() == 2;
  const int64_t rows = batched ? probs.size(0) : 1, C = probs.size(-1);
  const std::vector<double> w = native::to_dtype(probs, kFloat64).to_vector<double>();  // (rows * C)
  Tensor out = native::empty(batched ? IntList{rows, num_samples} : IntList{num_samples}, kInt64);
  int64_t* o = out.data_ptr<int64_t>();
  Generator& gen = default_generator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> row(w.begin() + r * C, w.begin() + (r + 1) * C);
    int64_t positive = 0;
    for (double v : row) {
      LS_CHECK(std::isfinite(v) && v >= 0, "multinomial: probabilities must be finite and >= 0, got ", v);
      positive += v > 0;
    }
    LS_CHECK(positive > 0, "multinomial: row ", r, " has no positive probability");
    LS_CHECK(replacement || num_samples <= positive, "multinomial: cannot draw ", num_samples,
             " samples without replacement from ", positive, " classes with a positive probability; "
             "pass replacement = true or draw fewer");
    for (int64_t s = 0; s < num_samples; ++s) {
      double total = 0;
      for (double v : row) total += v;
      // Inverse CDF: the first class whose running sum exceeds u * total.
      const double u = gen.uniform() * total;
      double running = 0;
      int64_t pick = C - 1;
      for (int64_t c = 0; c < C; ++c) {
        running += row[static_cast<size_t>(c)];
        if (u < running) { pick = c; break; }
      }
      while (row[static_cast<size_t>(pick)] == 0) --pick;  // rounding at the top end
      o[r * num_samples + s] = pick;
      if (!replacement) row[static_cast<size_t>(pick)] = 0;
    }
  }
  return native::to_device(out, probs.device());  // drawn on the host, like the factories
}

}  // namespace lockstep
