// data/dataset.cpp — stacking examples into batches; TensorDataset.
// Read before: data/dataset.h. Read next: data/sampler.cpp.
#include "data/dataset.h"

#include <string>

#include "core/error.h"
#include "core/factory.h"
#include "core/native/native.h"

namespace lockstep::data {

namespace {
std::string describe(const Tensor& t) {
  return t.defined() ? t.shape_str() + " " + dtype_name(t.dtype()) : "an undefined tensor";
}

// Copies part(i) of every example into row i of one new (B, ...) tensor.
template <class Part>
Tensor stack_part(const std::vector<Example>& examples, Part part, const char* what) {
  const Tensor& first = part(examples[0]);
  LS_CHECK(first.defined(), "stack_examples: example 0 has an undefined ", what);
  IntList sizes = first.sizes();
  sizes.insert(sizes.begin(), static_cast<int64_t>(examples.size()));
  Tensor out = native::empty(sizes, first.dtype());  // (B, ...)
  for (size_t i = 0; i < examples.size(); ++i) {
    const Tensor& t = part(examples[i]);
    LS_CHECK(t.defined() && t.sizes() == first.sizes() && t.dtype() == first.dtype(),
             "stack_examples: every example's ", what, " must have the same shape and dtype; "
             "example 0 has ", describe(first), " but example ", i, " has ", describe(t),
             " (pad or resize the examples in the dataset's get())");
    native::copy_(native::select(out, 0, static_cast<int64_t>(i)), t);
  }
  return out;
}
}  // namespace

Batch stack_examples(const std::vector<Example>& examples) {
  if (examples.empty()) return {};
  return {stack_part(examples, [](const Example& e) -> const Tensor& { return e.data; }, "data"),
          stack_part(examples, [](const Example& e) -> const Tensor& { return e.target; },
                     "target")};
}

Batch Dataset::get_batch(const std::vector<int64_t>& indices) const {
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (int64_t i : indices) examples.push_back(get(i));
  return stack_examples(examples);
}

TensorDataset::TensorDataset(Tensor data, Tensor targets)
    : data_(std::move(data)), targets_(std::move(targets)) {
  LS_CHECK(data_.defined() && targets_.defined(),
           "TensorDataset: data and targets must both be defined tensors");
  LS_CHECK(data_.dim() >= 1 && targets_.dim() >= 1,
           "TensorDataset: data and targets need a first (example) dim, got data ",
           data_.shape_str(), " and targets ", targets_.shape_str());
  LS_CHECK(data_.size(0) == targets_.size(0), "TensorDataset: data ", data_.shape_str(),
           " and targets ", targets_.shape_str(),
           " must have the same size in dim 0 (one row per example)");
  LS_CHECK(data_.device().is_cpu() && targets_.device().is_cpu(),
           "TensorDataset: data and targets must be CPU tensors; move batches to the GPU after "
           "loading them");
}

Example TensorDataset::get(int64_t index) const {
  LS_CHECK(index >= 0 && index < size(), "TensorDataset: index ", index,
           " is out of range for a dataset of ", size(), " examples");
  return {native::select(data_, 0, index), native::select(targets_, 0, index)};
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  for (int64_t i : indices) {
    LS_CHECK(i >= 0 && i < size(), "TensorDataset: index ", i,
             " is out of range for a dataset of ", size(), " examples");
  }
  Tensor index = tensor<int64_t>(indices, {static_cast<int64_t>(indices.size())});  // (B)
  return {native::index_select(data_, 0, index), native::index_select(targets_, 0, index)};
}

}  // namespace lockstep::data
