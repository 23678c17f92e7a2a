// tests/core/test_embedding.cpp — native::embedding_forward / embedding_backward.
//
// The forward gathers rows for indices of any shape (int64 and int32); the
// backward sums repeated indices and leaves the padding_idx row at zero; bad
// indices, dtypes and padding_idx values give errors naming the index and
// num_embeddings.
// Read before: core/native/embedding.cpp.
#include <doctest/doctest.h>

#include <vector>

#include "core/error.h"
#include "core/factory.h"
#include "core/native/native.h"
#include "core/native/nn_kernels_transformer.h"

namespace ls = lockstep;
namespace native = lockstep::native;
using ls::Tensor;

namespace {
// weight[r, c] = 10 r + c: each value says where it came from.
Tensor labelled_table(int64_t num, int64_t dim) {
  std::vector<float> v;
  for (int64_t r = 0; r < num; ++r) {
    for (int64_t c = 0; c < dim; ++c) v.push_back(static_cast<float>(10 * r + c));
  }
  return ls::tensor(v, {num, dim});
}
}  // namespace

TEST_CASE("embedding: forward gathers the indexed rows into (*indices, dim)") {
  Tensor w = labelled_table(5, 3);
  Tensor idx = ls::tensor(std::vector<int64_t>{4, 0, 4, 2}, {2, 2});
  Tensor y = native::embedding_forward(w, idx, -1);
  CHECK(y.sizes() == ls::IntList{2, 2, 3});
  CHECK(y.to_vector<float>() == std::vector<float>{40, 41, 42, 0, 1, 2, 40, 41, 42, 20, 21, 22});
  Tensor idx32 = ls::tensor(std::vector<int32_t>{1, 3});
  CHECK(native::embedding_forward(w, idx32, -1).to_vector<float>() ==
        std::vector<float>{10, 11, 12, 30, 31, 32});
  // A 0-d index gives one row of shape (dim).
  Tensor one = native::embedding_forward(w, ls::scalar_tensor(2, ls::kInt64), -1);
  CHECK(one.sizes() == ls::IntList{3});
  CHECK(one.to_vector<float>() == std::vector<float>{20, 21, 22});
}

TEST_CASE("embedding: backward sums repeated indices and skips padding_idx") {
  Tensor idx = ls::tensor(std::vector<int64_t>{1, 3, 1, 0}, {2, 2});
  std::vector<float> gv;
  for (int i = 0; i < 8; ++i) gv.push_back(static_cast<float>(i + 1));
  Tensor g = ls::tensor(gv, {2, 2, 2});  // rows (1,2) (3,4) (5,6) (7,8)
  Tensor dw = native::embedding_backward(g, idx, 4, -1);
  CHECK(dw.sizes() == ls::IntList{4, 2});
  CHECK(dw.to_vector<float>() == std::vector<float>{7, 8, 1 + 5, 2 + 6, 0, 0, 3, 4});
  Tensor dw_pad = native::embedding_backward(g, idx, 4, 1);
  CHECK(dw_pad.to_vector<float>() == std::vector<float>{7, 8, 0, 0, 0, 0, 3, 4});
}

TEST_CASE("embedding: errors name the bad index and num_embeddings") {
  Tensor w = ls::zeros({5, 3});
  CHECK_THROWS_WITH_AS(native::embedding_forward(w, ls::tensor(std::vector<int64_t>{0, 7}), -1),
                       doctest::Contains("embedding: index 7 (at flat position 1 of indices [2]) "
                                         "is out of range for num_embeddings 5"),
                       ls::Error);
  CHECK_THROWS_WITH_AS(native::embedding_forward(w, ls::tensor(std::vector<int64_t>{-1}), -1),
                       doctest::Contains("index -1"), ls::Error);
  CHECK_THROWS_WITH_AS(native::embedding_forward(w, ls::tensor(std::vector<float>{1}), -1),
                       doctest::Contains("embedding: indices must be int64 or int32, got float32"),
                       ls::Error);
  CHECK_THROWS_WITH_AS(native::embedding_forward(w, ls::tensor(std::vector<int64_t>{0}), 5),
                       doctest::Contains("embedding: padding_idx 5 must be -1 (none) or in [0, 5)"),
                       ls::Error);
  CHECK_THROWS_WITH_AS(
      native::embedding_forward(ls::zeros({5}), ls::tensor(std::vector<int64_t>{0}), -1),
      doctest::Contains("embedding: weight must be 2-d"), ls::Error);
}
