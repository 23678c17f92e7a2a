// tests/core/test_from_blob.cpp — from_blob over caller-owned memory (no copy: a
// write through either side is seen by the other; strides; dtypes; messages) and
// multinomial (frequencies, no repeats without replacement, seeds, messages).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/factory.h"
#include "core/from_blob.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace ls = lockstep;

TEST_CASE("from_blob with a deleter: runs it once, after the last tensor and view are gone, not on a refused call") {
  int calls = 0;
  auto* data = new float[6]{1, 2, 3, 4, 5, 6};
  {
    ls::Tensor view;
    {
      ls::Tensor t = ls::from_blob(data, {2, 3}, [&calls](void* p) {
        ++calls;
        delete[] static_cast<float*>(p);
      });
      view = t.narrow(0, 1, 1);  // (1, 3)
      CHECK(view.sum().item<float>() == 15.0f);
    }
    CHECK(calls == 0);  // the view still reads it
  }
  CHECK(calls == 1);
  float stack[2] = {0, 0};
  CHECK_THROWS(ls::from_blob(stack, {2}, [&calls](void*) { ++calls; }, ls::TensorOptions().device(ls::Device::cuda(0))));
  CHECK(calls == 1);  // refused: the caller still owns the memory
}

TEST_CASE("from_blob: shares the caller's memory, with sizes, strides and a dtype") {
  std::vector<float> data = {1, 2, 3, 4, 5, 6};
  ls::Tensor t = ls::from_blob(data.data(), {2, 3});
  CHECK(t.dtype() == ls::kFloat32);
  CHECK(t.to_vector<float>() == data);
  data[4] = 50;  // the tensor sees the caller's write
  CHECK(t.select(0, 1).select(0, 1).item<float>() == 50);
  t.mul_(2.0);  // and the caller sees the tensor's
  CHECK(data[0] == 2);
  ls::Tensor owned = t.clone();
  data[0] = -1;
  CHECK(owned.select(0, 0).select(0, 0).item<float>() == 2);

  ls::Tensor columns = ls::from_blob(data.data(), {3, 2}, {1, 3});  // the transpose, by strides
  CHECK(ls::equal(columns, t.t()));
  std::vector<uint8_t> bytes = {0, 128, 255, 7};
  ls::Tensor u = ls::from_blob(bytes.data(), {2, 2}, ls::kUInt8);
  CHECK(u.dtype() == ls::kUInt8);
  CHECK(u.sum().item<int64_t>() == 390);
  CHECK_THROWS_WITH_AS(ls::from_blob(nullptr, {2}), doctest::Contains("null"), ls::Error);
  CHECK_THROWS_WITH_AS(ls::from_blob(data.data(), {2, 3}, {1}), doctest::Contains("strides"), ls::Error);
}

TEST_CASE("multinomial: frequencies follow the weights, without replacement no class repeats") {
  ls::manual_seed(61);
  ls::Tensor w = ls::tensor(std::vector<float>{1, 0, 3}, {3});  // unnormalised: 1/4, 0, 3/4
  ls::Tensor s = ls::multinomial(w, 4000, /*replacement=*/true);
  CHECK(s.dtype() == ls::kInt64);
  const std::vector<int64_t> v = s.to_vector<int64_t>();
  const auto count = [&](int64_t c) { return std::count(v.begin(), v.end(), c); };
  CHECK(count(1) == 0);
  CHECK(count(0) > 850);  // expected 1000, std 27
  CHECK(count(0) < 1150);
  ls::Tensor rows = ls::tensor(std::vector<float>{1, 1, 1, 1, 0, 0, 5, 5}, {2, 4});
  ls::Tensor picks = ls::multinomial(rows, 2);  // without replacement
  CHECK(picks.sizes() == ls::IntList{2, 2});
  const std::vector<int64_t> p = picks.to_vector<int64_t>();
  CHECK(p[0] != p[1]);
  CHECK(std::min(p[2], p[3]) == 2);
  CHECK(std::max(p[2], p[3]) == 3);
  ls::manual_seed(61);
  CHECK(ls::multinomial(w, 4000, true).to_vector<int64_t>() == v);  // the seed decides
  CHECK_THROWS_WITH_AS(ls::multinomial(w, 3), doctest::Contains("without replacement"), ls::Error);
  CHECK_THROWS_WITH_AS(ls::multinomial(ls::zeros({3}), 1), doctest::Contains("no positive"), ls::Error);
  CHECK_THROWS_WITH_AS(ls::multinomial(ls::tensor(std::vector<float>{1, -1}, {2}), 1),
                       doctest::Contains(">= 0"), ls::Error);
}
