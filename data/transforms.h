// data/transforms.h — transforms a dataset's examples go through on their way
// to the DataLoader: `dataset.map(transform)` (data/map_dataset.h), in
// libtorch's spelling:
//
//   auto train = ls::data::datasets::MNIST(root)
//                    .map(ls::data::transforms::Normalize<>(0.1307, 0.3081))
//                    .map(ls::data::transforms::Stack<>());
//
// A transform is a value with `Example apply(Example) const` (one example) and,
// when it can work on a whole stacked batch at once, `Batch apply_batch(Batch)
// const` too. See Note [Transforms on batches].
//
// § Note [Transforms on batches]
// lockstep's DataLoader asks a dataset for whole batches (Dataset::get_batch),
// and a TensorDataset such as MNIST answers with one index_select. A transform
// that treats every example alike and elementwise — Normalize — gives the same
// bytes applied to the stacked batch (B, C, H, W) as applied to each (C, H, W)
// and stacked: the same float operations on the same values, with the
// per-channel mean (C, 1, 1) broadcast either way. Such a transform defines
// apply_batch, and a MapDataset over it keeps the source's fast get_batch and
// runs the transform once per batch. A transform without apply_batch (Lambda,
// TensorLambda: lockstep cannot know what the function does to a batch) is
// applied example by example, and the results are stacked. Either way the
// loader's batches are the same; tests/data/test_transforms.cpp checks it.
// Transforms run on the loader's worker threads, so apply must be safe to call
// concurrently: these are immutable after construction.
//
// Stack: libtorch's DataLoader hands out a std::vector of examples unless the
// dataset is mapped through Stack<>, which stacks them into one Example.
// lockstep's DataLoader always stacks (every Batch is stacked), so Stack<>
// changes nothing here: it is accepted so that the libtorch line compiles and
// means what it meant there, and it is the identity on examples and batches.
//
// The `<>` of libtorch's templates (the target type, Tensor) is accepted and
// may be left out: Normalize(0.5, 0.5) and Normalize<>(0.5, 0.5) are the same.
// Read before: data/dataset.h. Read next: data/map_dataset.h, data/mnist.h.
#pragma once

#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include "data/dataset.h"

namespace lockstep::data::transforms {

// Checks that a transform template is used with lockstep's only target type.
template <class Target>
constexpr void check_target_type() {
  static_assert(std::is_same_v<Target, Tensor>,
                "lockstep's Example holds Tensor data and a Tensor target: write Normalize<>, "
                "Stack<> (or leave out the <>)");
}

// The work of Normalize; see Normalize below.
class NormalizeTransform {
 public:
  NormalizeTransform(std::vector<double> mean, std::vector<double> stddev);

  // data (C, ...) -> (data - mean[c]) / stddev[c]; the target is unchanged.
  Example apply(Example example) const;
  // data (B, C, ...), the same per example (Note [Transforms on batches]).
  Batch apply_batch(Batch batch) const;

  const std::vector<double>& mean() const { return mean_; }
  const std::vector<double>& stddev() const { return stddev_; }

 private:
  // `data` with its channels at dim `channel_dim`.
  Tensor normalize(const Tensor& data, int64_t channel_dim) const;

  std::vector<double> mean_, stddev_;
};

// (data - mean) / stddev, per channel, as torchvision's Normalize and libtorch's
// transforms::Normalize<>: one mean and stddev for every channel, or one per
// channel (the example's dim 0). The data must be floating (MNIST's is float32
// in [0, 1]); the arithmetic is in the data's dtype, subtraction then division.
template <class Target = Tensor>
class Normalize : public NormalizeTransform {
 public:
  Normalize(double mean, double stddev) : NormalizeTransform({mean}, {stddev}) {
    check_target_type<Target>();
  }
  Normalize(std::vector<double> mean, std::vector<double> stddev)
      : NormalizeTransform(std::move(mean), std::move(stddev)) {
    check_target_type<Target>();
  }
};

// libtorch's Stack<>: the identity here, because lockstep's loader always
// stacks (see the header comment).
template <class T = Example>
struct Stack {
  static_assert(std::is_same_v<T, Example>, "lockstep's Stack<> stacks Examples: write Stack<>");
  Example apply(Example example) const { return example; }
  Batch apply_batch(Batch batch) const { return batch; }
};

// A function Example -> Example, applied to each example.
class Lambda {
 public:
  explicit Lambda(std::function<Example(Example)> fn);
  Example apply(Example example) const { return fn_(std::move(example)); }

 private:
  std::function<Example(Example)> fn_;
};

// A function Tensor -> Tensor applied to each example's data (libtorch's
// TensorLambda); the target is unchanged.
class TensorLambda {
 public:
  explicit TensorLambda(std::function<Tensor(Tensor)> fn);
  Example apply(Example example) const {
    return {fn_(std::move(example.data)), std::move(example.target)};
  }

 private:
  std::function<Tensor(Tensor)> fn_;
};

}  // namespace lockstep::data::transforms
