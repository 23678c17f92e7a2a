// tests/cuda/test_cuda_reduce.cpp — the CUDA reductions, softmax and indexing
// ops (core/cuda/{reduce,softmax,index}.cu) against their CPU kernels.
// Skipped without a GPU (Note [Skipping gpu tests]).
// Read before: tests/cuda/test_cuda_core.cpp.
#include <doctest/doctest.h>

#include <limits>
#include <tuple>
#include <vector>

#include "core/factory.h"
#include "core/native/native.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/errors.h"


TEST_CASE("CUDA sum and mean match the CPU over any set of dims") {
  const std::vector<IntList> dim_sets = {{}, {0}, {1}, {2}, {-1}, {0, 2}, {1, 2}, {0, 1}, {0, 1, 2}};
  for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64, ls::kInt64, ls::kInt32, ls::kBool}) {
    // A permuted (non-contiguous) (6, 5, 7) input.
    const Tensor x = ls::native::permute(random_cpu({7, 6, 5}, dtype), {1, 2, 0});
    for (const IntList& dims : dim_sets) {
      for (bool keepdim : {false, true}) {
        CAPTURE(dtype);
        CAPTURE(dims.size());
        CAPTURE(keepdim);
        check_matches(ls::native::sum(on_cuda(x), dims, keepdim), ls::native::sum(x, dims, keepdim),
                      1e-5, 1e-5);
        if (ls::is_floating_point(dtype)) {
          check_matches(ls::native::mean(on_cuda(x), dims, keepdim),
                        ls::native::mean(x, dims, keepdim), 1e-5, 1e-6);
        }
      }
    }
  }
  // Long rows take the two-pass (chunked) path; many short rows the one-pass path.
  const Tensor big = ls::randn({3, 300001});
  check_matches(ls::native::sum(on_cuda(big), {}, false), ls::native::sum(big, {}, false), 1e-5, 1e-3);
  check_matches(ls::native::sum(on_cuda(big), {1}, false), ls::native::sum(big, {1}, false), 1e-5, 1e-3);
  check_matches(ls::native::mean(on_cuda(big), {0}, true), ls::native::mean(big, {0}, true), 1e-5, 1e-6);
  // sum_to, the backward of broadcasting.
  const Tensor g = ls::randn({4, 3, 5});
  for (const IntList& shape : std::vector<IntList>{{3, 5}, {3, 1}, {1, 5}, {5}, {4, 3, 5}, {}}) {
    check_matches(ls::native::sum_to(on_cuda(g), shape), ls::native::sum_to(g, shape), 1e-5, 1e-6);
  }
}

TEST_CASE("CUDA max, min, argmax and argmin match the CPU including ties") {
  for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64, ls::kInt64, ls::kInt32, ls::kUInt8}) {
    // Small integers make ties likely: the first index must win, as on the CPU.
    const Tensor x = ls::native::permute(random_cpu({7, 6, 5}, dtype), {1, 2, 0});
    check_matches(ls::native::max_all(on_cuda(x)), ls::native::max_all(x));
    check_matches(ls::native::min_all(on_cuda(x)), ls::native::min_all(x));
    for (int64_t dim : {0, 1, 2, -1}) {
      for (bool keepdim : {false, true}) {
        CAPTURE(dtype);
        CAPTURE(dim);
        auto [v, i] = ls::native::max_dim(on_cuda(x), dim, keepdim);
        auto [cv, ci] = ls::native::max_dim(x, dim, keepdim);
        check_matches(v, cv);
        check_matches(i, ci);
        auto [mv, mi] = ls::native::min_dim(on_cuda(x), dim, keepdim);
        auto [cmv, cmi] = ls::native::min_dim(x, dim, keepdim);
        check_matches(mv, cmv);
        check_matches(mi, cmi);
        check_matches(ls::native::argmax(on_cuda(x), dim, keepdim), ls::native::argmax(x, dim, keepdim));
        check_matches(ls::native::argmin(on_cuda(x), dim, keepdim), ls::native::argmin(x, dim, keepdim));
      }
    }
  }
  const Tensor big = ls::randn({1000003});
  check_matches(ls::native::max_all(on_cuda(big)), ls::native::max_all(big));
  check_matches(ls::native::argmax(on_cuda(ls::native::view(big, {1, 1000003})), 1, false),
                ls::native::argmax(ls::native::view(big, {1, 1000003}), 1, false));
  // NaN wins, as on the CPU.
  Tensor with_nan = ls::randn({10});
  ls::native::fill_(ls::native::narrow(with_nan, 0, 6, 1), std::numeric_limits<double>::quiet_NaN());
  CHECK(ls::native::argmax(on_cuda(with_nan), 0, false).item<int64_t>() == 6);
  const std::string err = ls::testing::error_of([&] { ls::native::max_all(on_cuda(ls::native::empty({0}))); });
  CHECK(ls::testing::contains(err, "empty"));
}

TEST_CASE("CUDA softmax and log_softmax and their backward match the CPU on every dim") {
  for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64}) {
    const Tensor x = ls::native::to_dtype(
        ls::native::binary_scalar(ls::native::BinaryOp::Mul, ls::randn({4, 6, 300}), 3.0), dtype);
    const Tensor g = ls::native::to_dtype(ls::randn({4, 6, 300}), dtype);
    for (int64_t dim : {0, 1, 2}) {
      CAPTURE(dtype);
      CAPTURE(dim);
      const Tensor y = ls::native::softmax(x, dim);
      const Tensor ly = ls::native::log_softmax(x, dim);
      check_matches(ls::native::softmax(on_cuda(x), dim), y, 1e-5, 1e-6);
      check_matches(ls::native::log_softmax(on_cuda(x), dim), ly, 1e-5, 1e-5);
      check_matches(ls::native::softmax_backward(on_cuda(g), on_cuda(y), dim),
                    ls::native::softmax_backward(g, y, dim), 1e-5, 1e-6);
      check_matches(ls::native::log_softmax_backward(on_cuda(g), on_cuda(ly), dim),
                    ls::native::log_softmax_backward(g, ly, dim), 1e-5, 1e-5);
    }
  }
  // A non-contiguous input.
  const Tensor xt = ls::native::transpose(ls::randn({5, 7}), 0, 1);
  check_matches(ls::native::softmax(on_cuda(xt), 1), ls::native::softmax(xt, 1), 1e-5, 1e-6);
}

TEST_CASE("CUDA index_select, index_add_ and cat match the CPU") {
  const Tensor t = ls::randn({5, 4, 3});
  const Tensor index = ls::tensor<int64_t>({4, 0, -1, 2, 2});
  for (int64_t dim : {0, 2}) {
    const Tensor idx = dim == 0 ? index : ls::tensor<int64_t>({2, 0, 0, -3});
    const Tensor want = ls::native::index_select(t, dim, idx);
    check_matches(ls::native::index_select(on_cuda(t), dim, idx), want);           // CPU index
    check_matches(ls::native::index_select(on_cuda(t), dim, on_cuda(idx)), want);  // device index
    check_matches(ls::native::index_select(on_cuda(t), dim, on_cuda(ls::native::to_dtype(idx, ls::kInt32))), want);
  }
  // Repeated indices accumulate.
  for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64, ls::kInt64, ls::kInt32}) {
    CAPTURE(dtype);
    Tensor self_cpu = random_cpu({5, 4, 3}, dtype);
    Tensor self_gpu = on_cuda(self_cpu);
    const Tensor src = random_cpu({5, 5, 3}, dtype);
    const Tensor idx = ls::tensor<int64_t>({1, 3, 1, -1, 1});
    ls::native::index_add_(self_cpu, 1, idx, src);
    ls::native::index_add_(self_gpu, 1, on_cuda(idx), on_cuda(src));
    check_matches(self_gpu, self_cpu, 1e-5, 1e-6);
  }
  const std::string bad = ls::testing::error_of([&] {
    ls::native::index_select(on_cuda(t), 0, on_cuda(ls::tensor<int64_t>({1, 5})));
  });
  CHECK(ls::testing::contains(bad, "index 5 is out of range"));
  const std::string bad_cpu = ls::testing::error_of([&] {
    ls::native::index_select(on_cuda(t), 0, ls::tensor<int64_t>({-6}));
  });
  CHECK(ls::testing::contains(bad_cpu, "index -6 is out of range"));

  const Tensor a = random_cpu({2, 3}, ls::kFloat32);
  const Tensor b = ls::native::transpose(random_cpu({3, 4}, ls::kFloat64), 0, 1);  // (4, 3)
  const Tensor c = random_cpu({1, 3}, ls::kInt32);
  check_matches(ls::native::cat({on_cuda(a), on_cuda(b), on_cuda(c)}, 0), ls::native::cat({a, b, c}, 0));
  check_matches(ls::native::cat({on_cuda(a), on_cuda(a)}, 1), ls::native::cat({a, a}, 1));
}
