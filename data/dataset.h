// data/dataset.h — Dataset: what a DataLoader reads examples from.
//
// A Dataset is a map from an index in [0, size()) to an Example (one input
// tensor and one target tensor), like torch.utils.data.Dataset. A DataLoader
// asks for whole batches through get_batch(indices); the default stacks get()
// of each index, and datasets that hold everything in two big tensors
// (TensorDataset, FashionMNIST) override it with one index_select per tensor.
//
// Thread safety: with DataLoaderOptions::workers(n >= 1), get() and get_batch()
// run on background threads (several at once when n >= 2), so they must be
// safe to call concurrently. All datasets here are immutable after
// construction, which makes them so.
//
// This layer links core only: it calls ls::native:: kernels, never the
// differentiable Tensor methods of autograd/ (see Note [Where ops live] in
// core/tensor.h).
// Read before: core/tensor.h, core/native/native.h.
// Read next: data/sampler.h, data/data_loader.h, data/fashion_mnist.h.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace lockstep::data {

// One example: an input and its target (e.g. an image (1, 28, 28) and a 0-d int64 label).
struct Example {
  Tensor data;
  Tensor target;
};

// A stack of examples: data (B, ...) and target (B, ...).
struct Batch {
  Tensor data;
  Tensor target;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
  // The examples at `indices`, stacked along a new first dim. The default calls
  // get() per index and copies into the batch (see stack_examples).
  virtual Batch get_batch(const std::vector<int64_t>& indices) const;
};

// Stacks examples into a Batch; every example's data (and target) must have
// the same shape and dtype. An empty list gives undefined tensors.
Batch stack_examples(const std::vector<Example>& examples);

// Rows of two tensors that share their first dim: example i is
// (data[i], targets[i]), like torch.utils.data.TensorDataset.
// get() returns views of row i (they share storage with the dataset: clone
// before writing into them); get_batch() gathers with one index_select each.
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor data, Tensor targets);  // data (N, ...), targets (N, ...)

  int64_t size() const override { return data_.size(0); }
  Example get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices) const override;

  const Tensor& data() const { return data_; }        // (N, ...)
  const Tensor& targets() const { return targets_; }  // (N, ...)

 private:
  Tensor data_;
  Tensor targets_;
};

}  // namespace lockstep::data
