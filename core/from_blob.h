// core/from_blob.h — a tensor over memory the caller owns (libtorch's from_blob)
// and multinomial sampling.
//
//   float data[6] = {...};
//   ls::Tensor t = ls::from_blob(data, {2, 3});                    // float32, no copy
//   ls::Tensor u = ls::from_blob(bytes, {28, 28}, ls::kUInt8);      // any dtype
//   ls::Tensor v = ls::from_blob(p, {n}, [](void* p) { std::free(p); });  // frees p when done
//   ls::Tensor idx = ls::multinomial(probs, 5, /*replacement=*/true);
//
// from_blob never copies, and frees nothing unless given a deleter (libtorch's
// overload): then deleter(data) runs once the last tensor or view over it is
// gone. Without one, the tensor (and every view of it) reads
// and writes `data` directly, which must stay alive and unmoved while any of them
// is used; .clone() gives a tensor that owns a copy. Strides, when given, are in
// elements (row-major when left out). The memory is on the CPU.
// multinomial draws from the default generator (core/rng.h): probs (C) or (N, C),
// non-negative with a positive sum per row (unnormalised weights are fine); the
// result is int64 (num_samples) or (N, num_samples) on probs' device. Without replacement,
// num_samples <= the number of non-zero weights, and each draw removes its class.
// Read before: core/storage.h, core/factory.h. Read next: core/rng_state.h.
#pragma once

#include <functional>

#include "core/tensor.h"
#include "core/tensor_options.h"

namespace lockstep {

Tensor from_blob(void* data, const IntList& sizes, const TensorOptions& options = {});
Tensor from_blob(void* data, const IntList& sizes, const IntList& strides,
                 const TensorOptions& options = {});
Tensor from_blob(void* data, const IntList& sizes, std::function<void(void*)> deleter,
                 const TensorOptions& options = {});

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false);

}  // namespace lockstep
