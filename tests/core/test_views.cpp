// tests/core/test_views.cpp — views share storage; reshape/view/transpose/permute/
// (un)squeeze/flatten/narrow/select/expand; index_select, index_add_, cat; copy_.
#include <doctest/doctest.h>

#include "core/factory.h"
#include "core/native/native.h"
#include "core/tensor.h"

namespace ls = lockstep;
namespace nv = lockstep::native;

namespace {
ls::Tensor iota(const ls::IntList& sizes) {
  return nv::reshape(ls::arange(0, ls::numel_of(sizes), 1, ls::kFloat32), sizes);
}
}  // namespace

TEST_CASE("views: transpose shares storage and reads through strides") {
  ls::Tensor a = iota({2, 3});
  ls::Tensor t = nv::transpose(a, 0, 1);
  CHECK(t.sizes() == ls::IntList{3, 2});
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  nv::fill_(nv::select(t, 0, 1), 9.0);  // writes a's column 1
  CHECK(a.to_vector<float>() == std::vector<float>{0, 9, 2, 3, 9, 5});
  ls::Tensor c = nv::contiguous(t);
  CHECK(c.is_contiguous());
  CHECK(c.to_vector<float>() == t.to_vector<float>());
}

TEST_CASE("views: view, reshape and infer_size") {
  ls::Tensor a = iota({2, 3, 4});
  ls::Tensor v = nv::view(a, {6, -1});
  CHECK(v.sizes() == ls::IntList{6, 4});
  CHECK(v.impl()->storage == a.impl()->storage);
  CHECK_THROWS_WITH_AS(nv::view(a, {5, -1}), doctest::Contains("invalid for a tensor of 24"),
                       ls::Error);
  CHECK_THROWS_WITH_AS(nv::view(a, {-1, -1}), doctest::Contains("only one dimension"), ls::Error);
  ls::Tensor t = nv::transpose(a, 1, 2);  // (2, 4, 3), not viewable as (2, 12)... 
  CHECK_THROWS_WITH_AS(nv::view(t, {2, 12}), doctest::Contains("reshape"), ls::Error);
  ls::Tensor r = nv::reshape(t, {2, 12});  // copies
  CHECK(r.impl()->storage != a.impl()->storage);
  CHECK(r.to_vector<float>() == t.to_vector<float>());
  // Splitting one dim of a transposed tensor is still a view.
  ls::Tensor s = nv::view(t, {2, 2, 2, 3});
  CHECK(s.impl()->storage == a.impl()->storage);
  CHECK(s.to_vector<float>() == t.to_vector<float>());
  CHECK(nv::view(ls::full({1}, 3.0), {}).dim() == 0);
}

TEST_CASE("views: permute, unsqueeze, squeeze, flatten") {
  ls::Tensor a = iota({2, 3, 4});
  ls::Tensor p = nv::permute(a, {2, 0, 1});
  CHECK(p.sizes() == ls::IntList{4, 2, 3});
  CHECK(p.to_vector<float>()[1] == 4.0f);  // p[0,0,1] = a[0,1,0]
  CHECK_THROWS_WITH_AS(nv::permute(a, {0, 0, 1}), doctest::Contains("appears twice"), ls::Error);
  CHECK_THROWS_AS(nv::permute(a, {0, 1}), ls::Error);
  ls::Tensor u = nv::unsqueeze(a, -1);
  CHECK(u.sizes() == ls::IntList{2, 3, 4, 1});
  CHECK(nv::unsqueeze(a, 1).sizes() == ls::IntList{2, 1, 3, 4});
  CHECK(nv::squeeze(u, 3).sizes() == ls::IntList{2, 3, 4});
  CHECK(nv::squeeze(u, 0).sizes() == ls::IntList{2, 3, 4, 1});  // size 2: unchanged
  CHECK(nv::squeeze(iota({1, 3, 1})).sizes() == ls::IntList{3});
  CHECK(nv::flatten(a, 1, -1).sizes() == ls::IntList{2, 12});
  CHECK(nv::flatten(a, 0, -1).sizes() == ls::IntList{24});
  CHECK_THROWS_AS(nv::flatten(a, 2, 1), ls::Error);
}

TEST_CASE("views: narrow, select, expand") {
  ls::Tensor a = iota({3, 4});
  CHECK(nv::narrow(a, 1, 1, 2).to_vector<float>() == std::vector<float>{1, 2, 5, 6, 9, 10});
  CHECK_THROWS_WITH_AS(nv::narrow(a, 0, 2, 2), doctest::Contains("out of bounds"), ls::Error);
  CHECK(nv::select(a, 0, -1).to_vector<float>() == std::vector<float>{8, 9, 10, 11});
  CHECK_THROWS_AS(nv::select(a, 1, 4), ls::Error);
  ls::Tensor col = iota({3, 1});
  ls::Tensor e = nv::expand(col, {2, 3, 4});
  CHECK(e.sizes() == ls::IntList{2, 3, 4});
  CHECK(e.strides() == ls::IntList{0, 1, 0});
  CHECK(e.to_vector<float>()[5] == 1.0f);
  CHECK(nv::expand(col, {-1, 5}).sizes() == ls::IntList{3, 5});
  CHECK_THROWS_WITH_AS(nv::expand(iota({3, 2}), {3, 4}), doctest::Contains("cannot expand"),
                       ls::Error);
}

TEST_CASE("views: copy_ broadcasts and converts") {
  ls::Tensor dst = ls::zeros({2, 3}, ls::kFloat64);
  nv::copy_(dst, ls::tensor(std::vector<int64_t>{1, 2, 3}));
  CHECK(dst.to_vector<double>() == std::vector<double>{1, 2, 3, 1, 2, 3});
  nv::copy_(nv::transpose(dst, 0, 1), iota({3, 2}));
  CHECK(dst.to_vector<double>() == std::vector<double>{0, 2, 4, 1, 3, 5});
  CHECK_THROWS_AS(nv::copy_(ls::zeros({3}), ls::zeros({2, 3})), ls::Error);
}

TEST_CASE("index: index_select, index_add_ and cat") {
  ls::Tensor a = iota({3, 2});
  ls::Tensor idx = ls::tensor(std::vector<int64_t>{2, 0, 2});
  CHECK(nv::index_select(a, 0, idx).to_vector<float>() == std::vector<float>{4, 5, 0, 1, 4, 5});
  CHECK(nv::index_select(a, 1, ls::tensor(std::vector<int64_t>{1}))
            .to_vector<float>() == std::vector<float>{1, 3, 5});
  CHECK_THROWS_WITH_AS(nv::index_select(a, 0, ls::tensor(std::vector<int64_t>{3})),
                       doctest::Contains("out of range"), ls::Error);
  CHECK_THROWS_WITH_AS(nv::index_select(a, 0, ls::tensor(std::vector<float>{1})),
                       doctest::Contains("int64"), ls::Error);
  ls::Tensor acc = ls::zeros({3, 2});
  nv::index_add_(acc, 0, idx, ls::ones({3, 2}));
  CHECK(acc.to_vector<float>() == std::vector<float>{1, 1, 0, 0, 2, 2});
  ls::Tensor c = nv::cat({iota({2, 2}), iota({1, 2})}, 0);
  CHECK(c.sizes() == ls::IntList{3, 2});
  CHECK(c.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 0, 1});
  ls::Tensor c1 = nv::cat({iota({2, 1}), iota({2, 2})}, 1);
  CHECK(c1.to_vector<float>() == std::vector<float>{0, 0, 1, 1, 2, 3});
  CHECK_THROWS_WITH_AS(nv::cat({iota({2, 2}), iota({2, 3})}, 0),
                       doctest::Contains("sizes must match"), ls::Error);
  CHECK_THROWS_AS(nv::cat({}, 0), ls::Error);
}
