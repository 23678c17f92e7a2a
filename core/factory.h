// core/factory.h — making tensors: zeros, ones, full, arange, tensor, randn, ...
//
// Every factory takes optional TensorOptions (dtype, device, requires_grad);
// a tensor made with requires_grad(true) is a leaf that autograd tracks.
// Random factories draw from the default generator (see core/rng.h), so
// manual_seed(s) makes them reproducible.
// Read before: core/tensor_options.h. Read next: core/rng.h.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "core/tensor_options.h"

namespace lockstep {

Tensor empty(const IntList& sizes, const TensorOptions& options = {});
Tensor zeros(const IntList& sizes, const TensorOptions& options = {});
Tensor ones(const IntList& sizes, const TensorOptions& options = {});
Tensor full(const IntList& sizes, double value, const TensorOptions& options = {});
Tensor zeros_like(const Tensor& t, const TensorOptions& options);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);
// [start, end) in steps; int64 unless options say otherwise.
Tensor arange(int64_t end, const TensorOptions& options = TensorOptions().dtype(kInt64));
Tensor arange(int64_t start, int64_t end, int64_t step = 1,
              const TensorOptions& options = TensorOptions().dtype(kInt64));
Tensor eye(int64_t n, const TensorOptions& options = {});

// A tensor holding a copy of `values` with shape `sizes` (1-d if sizes is empty).
// dtype follows T (float -> float32, int64_t -> int64, ...) unless options set it.
template <class T>
Tensor tensor(const std::vector<T>& values, const IntList& sizes = {},
              const TensorOptions& options = {});
Tensor scalar_tensor(double value, const TensorOptions& options = {});  // 0-d

// Random: standard normal, uniform [low, high), integers [low, high), Bernoulli(p).
Tensor randn(const IntList& sizes, const TensorOptions& options = {});
Tensor rand(const IntList& sizes, const TensorOptions& options = {});
Tensor uniform(const IntList& sizes, double low, double high, const TensorOptions& options = {});
Tensor randint(int64_t low, int64_t high, const IntList& sizes,
               const TensorOptions& options = TensorOptions().dtype(kInt64));
Tensor bernoulli(const IntList& sizes, double p, const TensorOptions& options = {});
Tensor randn_like(const Tensor& t);
Tensor randperm(int64_t n);  // int64 permutation of [0, n)

}  // namespace lockstep
