// tests/data/test_dataset.cpp — TensorDataset (views of row i, index_select
// batches) and stack_examples.
#include <doctest/doctest.h>

#include "core/error.h"
#include "core/factory.h"
#include "core/native/native.h"
#include "data/dataset.h"

namespace ls = lockstep;
namespace ld = lockstep::data;

TEST_CASE("dataset: TensorDataset returns row i and gathers batches") {
  ls::Tensor data = ls::native::reshape(ls::arange(0, 12, 1, ls::kFloat32), {4, 3});  // (4, 3)
  ls::Tensor targets = ls::tensor<int64_t>({10, 11, 12, 13});                         // (4)
  ld::TensorDataset ds(data, targets);
  CHECK(ds.size() == 4);
  ld::Example ex = ds.get(2);
  CHECK(ex.data.to_vector<float>() == std::vector<float>{6, 7, 8});
  CHECK(ex.target.dim() == 0);
  CHECK(ex.target.item<int64_t>() == 12);
  CHECK(ex.data.impl()->storage == data.impl()->storage);  // a view of row 2
  ld::Batch b = ds.get_batch({3, 0, 3});
  CHECK(b.data.sizes() == ls::IntList{3, 3});
  CHECK(b.data.to_vector<float>() == std::vector<float>{9, 10, 11, 0, 1, 2, 9, 10, 11});
  CHECK(b.target.to_vector<int64_t>() == std::vector<int64_t>{13, 10, 13});
  CHECK_THROWS_WITH_AS(ds.get(4), doctest::Contains("index 4 is out of range"), ls::Error);
  CHECK_THROWS_AS(ds.get_batch({0, -1}), ls::Error);
  CHECK_THROWS_WITH_AS(ld::TensorDataset(data, ls::tensor<int64_t>({1, 2})),
                       doctest::Contains("same size in dim 0"), ls::Error);
}

TEST_CASE("dataset: stack_examples stacks equal shapes and rejects mismatches") {
  std::vector<ld::Example> examples = {{ls::full({2}, 1.0), ls::scalar_tensor(0, ls::kInt64)},
                                       {ls::full({2}, 2.0), ls::scalar_tensor(1, ls::kInt64)}};
  ld::Batch b = ld::stack_examples(examples);
  CHECK(b.data.sizes() == ls::IntList{2, 2});
  CHECK(b.data.to_vector<float>() == std::vector<float>{1, 1, 2, 2});
  CHECK(b.target.to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  examples.push_back({ls::full({3}, 3.0), ls::scalar_tensor(2, ls::kInt64)});
  CHECK_THROWS_WITH_AS(ld::stack_examples(examples), doctest::Contains("example 2 has [3]"),
                       ls::Error);
  CHECK_FALSE(ld::stack_examples({}).data.defined());
}
