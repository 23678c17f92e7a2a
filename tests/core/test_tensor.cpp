// tests/core/test_tensor.cpp — Tensor metadata, storage sharing, dtypes, f16/bf16,
// factories, RNG and printing.
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>

#include "core/factory.h"
#include "core/native/native.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace ls = lockstep;

TEST_CASE("tensor: factories give the requested shape, dtype and values") {
  ls::Tensor z = ls::zeros({2, 3});
  CHECK(z.sizes() == ls::IntList{2, 3});
  CHECK(z.dtype() == ls::kFloat32);
  CHECK(z.numel() == 6);
  CHECK(z.is_contiguous());
  CHECK(z.strides() == ls::IntList{3, 1});
  for (float v : z.to_vector<float>()) CHECK(v == 0.0f);
  for (double v : ls::ones({4}, ls::kFloat64).to_vector<double>()) CHECK(v == 1.0);
  for (float v : ls::full({2, 2}, 0.5).to_vector<float>()) CHECK(v == 0.5f);
  ls::Tensor r = ls::arange(5);
  CHECK(r.dtype() == ls::kInt64);
  CHECK(r.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(ls::arange(1, 10, 3).to_vector<int64_t>() == std::vector<int64_t>{1, 4, 7});
  ls::Tensor t = ls::tensor(std::vector<float>{1, 2, 3, 4}, {2, 2});
  CHECK(t.sizes() == ls::IntList{2, 2});
  CHECK(t.to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  CHECK(ls::tensor(std::vector<int64_t>{0, 2}, {2}).dtype() == ls::kInt64);
  CHECK(ls::tensor(std::vector<int32_t>{0, 2}).dtype() == ls::kInt32);
  CHECK(ls::tensor(std::vector<uint8_t>{0, 2}).dtype() == ls::kUInt8);
  auto opts = ls::TensorOptions().dtype(ls::kFloat64).device(ls::Device::cpu()).requires_grad(true);
  ls::Tensor d = ls::zeros({3}, opts);
  CHECK(d.dtype() == ls::kFloat64);
  CHECK(d.requires_grad());
  CHECK(d.is_leaf());
  CHECK(ls::eye(3).to_vector<float>() == std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1});
}

TEST_CASE("tensor: factory errors name the problem") {
  CHECK_THROWS_WITH_AS(ls::tensor(std::vector<float>{1, 2, 3}, {2, 2}),
                       doctest::Contains("holds 4 elements but 3 values"), ls::Error);
  CHECK_THROWS_AS(ls::zeros({2, -1}), ls::Error);
  CHECK_THROWS_WITH_AS(ls::zeros({2}, ls::Device::cuda(0)), doctest::Contains("cuda:0"), ls::Error);
  CHECK_THROWS_WITH_AS(ls::zeros({2}, ls::kInt64).requires_grad_(),
                       doctest::Contains("floating point"), ls::Error);
}

TEST_CASE("tensor: item, data_ptr and their errors") {
  ls::Tensor s = ls::full({1}, 2.5);
  CHECK(s.item<float>() == 2.5f);
  CHECK(s.item<double>() == 2.5);
  CHECK(*s.data_ptr<float>() == 2.5f);
  CHECK_THROWS_WITH_AS(s.data_ptr<double>(), doctest::Contains("float32"), ls::Error);
  CHECK_THROWS_WITH_AS(ls::zeros({2}).item<float>(), doctest::Contains("one element"), ls::Error);
  ls::Tensor undefined;
  CHECK_FALSE(undefined.defined());
  CHECK_THROWS_WITH_AS(undefined.sizes(), doctest::Contains("undefined"), ls::Error);
}

TEST_CASE("tensor: negative dims wrap and out-of-range dims throw") {
  ls::Tensor t = ls::zeros({2, 3, 4});
  CHECK(t.size(-1) == 4);
  CHECK(t.size(0) == 2);
  CHECK_THROWS_WITH_AS(t.size(3), doctest::Contains("out of range"), ls::Error);
}

TEST_CASE("tensor: dtype conversion including f16 and bf16 storage") {
  ls::Tensor t = ls::tensor(std::vector<float>{1.5f, -2.25f, 65504.0f, 1e-6f, 3.14159f});
  ls::Tensor h = ls::native::to_dtype(t, ls::kFloat16);
  CHECK(h.dtype() == ls::kFloat16);
  CHECK(h.element_size() == 2);
  std::vector<float> back = ls::native::to_dtype(h, ls::kFloat32).to_vector<float>();
  CHECK(back[0] == 1.5f);
  CHECK(back[1] == -2.25f);
  CHECK(back[2] == 65504.0f);
  CHECK(back[3] == doctest::Approx(1e-6).epsilon(0.05));  // fp16 subnormal
  CHECK(back[4] == doctest::Approx(3.14159).epsilon(1e-3));
  std::vector<float> bf = ls::native::to_dtype(ls::native::to_dtype(t, ls::kBFloat16), ls::kFloat32)
                              .to_vector<float>();
  CHECK(bf[0] == 1.5f);
  CHECK(bf[4] == doctest::Approx(3.14159).epsilon(1e-2));
  CHECK(ls::Half(70000.0f) == std::numeric_limits<float>::infinity());
  CHECK(std::isnan(static_cast<float>(ls::Half(std::nanf("")))));
  CHECK(std::isnan(static_cast<float>(ls::BFloat16(std::nanf("")))));
  // Round to nearest even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 in fp16.
  CHECK(static_cast<float>(ls::Half(1.0f + 0x1p-11f)) == 1.0f);
  CHECK(static_cast<float>(ls::Half(1.0f + 3 * 0x1p-11f)) == 1.0f + 0x1p-9f);
  ls::Tensor i = ls::native::to_dtype(ls::tensor(std::vector<float>{1.7f, -2.2f}), ls::kInt64);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, -2});
  CHECK(ls::promote_types(ls::kInt64, ls::kFloat32) == ls::kFloat32);
  CHECK(ls::promote_types(ls::kFloat32, ls::kFloat64) == ls::kFloat64);
  CHECK(ls::promote_types(ls::kBool, ls::kUInt8) == ls::kUInt8);
}

TEST_CASE("tensor: manual_seed makes random factories reproducible") {
  ls::manual_seed(7);
  std::vector<float> a = ls::randn({1000}).to_vector<float>();
  ls::manual_seed(7);
  std::vector<float> b = ls::randn({1000}).to_vector<float>();
  CHECK(a == b);
  double mean = 0, sq = 0;
  for (float v : a) mean += v;
  mean /= a.size();
  for (float v : a) sq += (v - mean) * (v - mean);
  CHECK(std::abs(mean) < 0.1);
  CHECK(std::abs(std::sqrt(sq / a.size()) - 1.0) < 0.1);
  for (float v : ls::rand({500}).to_vector<float>()) {
    CHECK(v >= 0.0f);
    CHECK(v < 1.0f);
  }
  for (int64_t v : ls::randint(3, 6, {200}).to_vector<int64_t>()) {
    CHECK(v >= 3);
    CHECK(v < 6);
  }
  std::vector<float> bern = ls::bernoulli({2000}, 0.25).to_vector<float>();
  double ones = 0;
  for (float v : bern) ones += v;
  CHECK(ones / bern.size() == doctest::Approx(0.25).epsilon(0.2));
  std::vector<int64_t> perm = ls::randperm(50).to_vector<int64_t>();
  std::sort(perm.begin(), perm.end());
  for (int64_t k = 0; k < 50; ++k) CHECK(perm[k] == k);
}

TEST_CASE("tensor: printing is readable") {
  std::ostringstream os;
  os << ls::tensor(std::vector<float>{1, -2.5, 0, 3.14159f}, {2, 2});
  std::string s = os.str();
  CHECK(s.find("tensor([[") == 0);
  CHECK(s.find("-2.5000") != std::string::npos);
  CHECK(s.find("3.1416") != std::string::npos);
  CHECK(s.find("dtype=float32") != std::string::npos);
  std::ostringstream big;
  big << ls::zeros({2000});
  CHECK(big.str().find("...") != std::string::npos);
  std::ostringstream ints;
  ints << ls::arange(3);
  CHECK(ints.str().find("[0, 1, 2]") != std::string::npos);
}

TEST_CASE("tensor: CPU allocator aligns to 64 bytes and counts bytes") {
  auto before = ls::cpu_allocator().stats().current_bytes;
  {
    ls::Tensor t = ls::zeros({1000});
    CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % 64 == 0);
    CHECK(ls::cpu_allocator().stats().current_bytes >= before + 4000);
  }
  CHECK(ls::cpu_allocator().stats().current_bytes == before);
}

TEST_CASE("factories: a shape whose element count overflows int64 throws instead of wrapping") {
  CHECK_THROWS_WITH_AS(ls::zeros({int64_t{1} << 32, int64_t{1} << 32}),
                       doctest::Contains("[4294967296, 4294967296] has more elements than int64 can count"), ls::Error);
  CHECK_THROWS_WITH_AS(ls::empty({int64_t{1} << 62, 4}), doctest::Contains("overflows"), ls::Error);
  // The element count fits but its bytes do not.
  CHECK_THROWS_WITH_AS(ls::empty({int64_t{1} << 62}), doctest::Contains("needs more bytes than int64 can count"),
                       ls::Error);
  CHECK(ls::zeros({int64_t{1} << 20, 0}).numel() == 0);
}
