// data/map_dataset.h — `dataset.map(transform)`: a dataset seen through a
// transform, and the base class that gives a dataset its map(), in libtorch's
// spelling:
//
//   class MyDataset : public ls::data::datasets::Dataset<MyDataset> {
//    public:
//     ls::data::Example get(int64_t index) const override;   // (data, target)
//     int64_t size() const override;
//   };
//   auto ds = MyDataset(...).map(ls::data::transforms::Normalize<>(0.5, 0.5))
//                           .map(ls::data::transforms::Stack<>());
//   auto loader = ls::data::make_data_loader(std::move(ds), 64);
//
// datasets::Dataset<Self> is ls::data::Dataset (the interface the DataLoader
// reads) plus map(), which needs the concrete type Self to take the dataset
// over by value (the CRTP, as libtorch's datasets::Dataset<Self>). A second
// argument picks another base: MNIST is Dataset<MNIST, TensorDataset>, so it
// keeps TensorDataset's one-gather batches. map() on a temporary (or a
// std::move'd dataset) moves it into the MapDataset; on an lvalue it copies it
// (a TensorDataset copy shares its tensors, so that costs nothing). A
// MapDataset is itself a datasets::Dataset, so maps chain.
//
// Where lockstep differs from libtorch: get takes an int64_t and is const (it
// runs on the loader's threads), and size() returns an int64_t, not an
// optional (every lockstep dataset knows its size).
// Read before: data/dataset.h, data/transforms.h. Read next: data/mnist.h.
#pragma once

#include <concepts>
#include <utility>
#include <vector>

#include "data/dataset.h"
#include "data/transforms.h"

namespace lockstep::data {

// What map() accepts: a value with `Example apply(Example) const`
// (data/transforms.h). With `Batch apply_batch(Batch) const` as well it is
// applied to whole batches (Note [Transforms on batches]).
template <class T>
concept ExampleTransform = requires(const T& t, Example e) {
  { t.apply(std::move(e)) } -> std::same_as<Example>;
};
template <class T>
concept BatchTransform = ExampleTransform<T> && requires(const T& t, Batch b) {
  { t.apply_batch(std::move(b)) } -> std::same_as<Batch>;
};

template <class Source, class Transform>
class MapDataset;

namespace datasets {

template <class Self, class Base = data::Dataset>
  requires std::derived_from<Base, data::Dataset>
class Dataset : public Base {
 public:
  using Base::Base;

  // This dataset, moved into a MapDataset that applies `transform`.
  template <ExampleTransform T>
  MapDataset<Self, T> map(T transform) && {
    return MapDataset<Self, T>(std::move(static_cast<Self&>(*this)), std::move(transform));
  }
  // A copy of this dataset, seen through `transform`.
  template <ExampleTransform T>
  MapDataset<Self, T> map(T transform) const& {
    return MapDataset<Self, T>(static_cast<const Self&>(*this), std::move(transform));
  }
};

}  // namespace datasets

// Example i is transform.apply(source.get(i)); batches as Note [Transforms on batches] says.
template <class Source, class Transform>
class MapDataset : public datasets::Dataset<MapDataset<Source, Transform>> {
  static_assert(std::derived_from<Source, data::Dataset>,
                "MapDataset: the source must be a dataset (derived from ls::data::Dataset)");
  static_assert(ExampleTransform<Transform>,
                "MapDataset: the transform needs `Example apply(Example) const` (data/transforms.h)");

 public:
  MapDataset(Source source, Transform transform)
      : source_(std::move(source)), transform_(std::move(transform)) {}

  int64_t size() const override { return source_.size(); }
  Example get(int64_t index) const override { return transform_.apply(source_.get(index)); }
  Batch get_batch(const std::vector<int64_t>& indices) const override {
    if constexpr (BatchTransform<Transform>) {
      return transform_.apply_batch(source_.get_batch(indices));
    } else {
      return data::Dataset::get_batch(indices);  // get() per index, then stacked
    }
  }

  const Source& dataset() const { return source_; }
  const Transform& transform() const { return transform_; }

 private:
  Source source_;
  Transform transform_;
};

}  // namespace lockstep::data
