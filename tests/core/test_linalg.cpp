// tests/core/test_linalg.cpp — native::mm, bmm and matmul against naive loops.
//
// `naive_matmul` below spells out torch.matmul's rules with plain index
// arithmetic on doubles (promote 1-d operands, broadcast batch dims, three
// loops); every shape case, layout (transposed, strided, expanded views) and
// dtype is compared with it. Errors must name the op and both shapes.
// Read before: core/native/linalg.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/native/gemm.h"
#include "core/native/native.h"
#include "core/parallel.h"
#include "core/shape.h"
#include "tests/support/errors.h"

namespace ls = lockstep;
using lockstep::testing::error_of;
namespace native = lockstep::native;
using ls::IntList;
using ls::Tensor;

namespace {

// A contiguous tensor of uniform values in [-1, 1).
Tensor random_tensor(const IntList& sizes, ls::ScalarType dtype = ls::kFloat32,
                     unsigned seed = 1) {
  Tensor t = native::empty(sizes, dtype);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  ls::dispatch_floating(dtype, "random_tensor", [&]<class T>() {
    T* p = t.data_ptr<T>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = T(uniform(rng));
  });
  return t;
}

struct Dense {
  IntList sizes;
  std::vector<double> values;  // row-major
};

// torch.matmul on doubles, written as directly as possible.
Dense naive_matmul(const Tensor& a, const Tensor& b) {
  IntList as = a.sizes(), bs = b.sizes();
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  if (as.size() == 1) as.insert(as.begin(), 1);  // (k) -> (1, k)
  if (bs.size() == 1) bs.push_back(1);           // (k) -> (k, 1)
  const int64_t n = as[as.size() - 2], k = as.back(), m = bs.back();
  const IntList a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
  const IntList batch = ls::broadcast_shapes(a_batch, b_batch, "naive_matmul");
  const int64_t batch_count = ls::numel_of(batch);
  Dense out;
  out.values.assign(static_cast<size_t>(batch_count * n * m), 0.0);
  for (int64_t bi = 0; bi < batch_count; ++bi) {
    // Batch index -> flat matrix index in a and b (size-1 dims broadcast).
    int64_t rest = bi, a_index = 0, b_index = 0, a_scale = 1, b_scale = 1;
    for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
      const int64_t i = rest % batch[d];
      rest /= batch[d];
      const int64_t da = d - (static_cast<int64_t>(batch.size()) - static_cast<int64_t>(a_batch.size()));
      const int64_t db = d - (static_cast<int64_t>(batch.size()) - static_cast<int64_t>(b_batch.size()));
      if (da >= 0) {
        a_index += (a_batch[da] == 1 ? 0 : i) * a_scale;
        a_scale *= a_batch[da];
      }
      if (db >= 0) {
        b_index += (b_batch[db] == 1 ? 0 : i) * b_scale;
        b_scale *= b_batch[db];
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < m; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          sum += av[(a_index * n + i) * k + p] * bv[(b_index * k + p) * m + j];
        }
        out.values[(bi * n + i) * m + j] = sum;
      }
    }
  }
  out.sizes = batch;
  if (a.dim() >= 2) out.sizes.push_back(n);
  if (b.dim() >= 2) out.sizes.push_back(m);
  return out;
}

void check_matches_naive(const Tensor& got, const Tensor& a, const Tensor& b) {
  const Dense expected = naive_matmul(a, b);
  REQUIRE(got.sizes() == expected.sizes);
  CHECK(got.dtype() == a.dtype());
  CHECK(got.is_contiguous());
  const std::vector<double> values = got.to_vector<double>();
  const double tol = (a.dtype() == ls::kFloat32 ? 2e-5 : 1e-12) * double(a.size(-1) + 1);
  double worst = 0;
  size_t worst_at = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const double err = std::abs(values[i] - expected.values[i]);
    if (err > worst) worst = err, worst_at = i;
  }
  INFO(ls::detail::str(a.shape_str(), " x ", b.shape_str(), " ", ls::dtype_name(a.dtype()),
                       ": worst error ", worst, " at element ", worst_at));
  CHECK(worst <= tol);
}

// The message of what op(a, b) throws (error_of of tests/support/errors.h).
std::string error_of_op(Tensor (*op)(const Tensor&, const Tensor&), const Tensor& a,
                        const Tensor& b) {
  return error_of([&] { op(a, b); });
}

const ls::ScalarType kDtypes[] = {ls::kFloat32, ls::kFloat64};

}  // namespace

TEST_CASE("mm matches naive loops for odd sizes in float32 and float64") {
  const int64_t sizes[][3] = {{1, 1, 1}, {3, 4, 5}, {7, 33, 1}, {33, 65, 7}, {65, 1, 33}};
  for (ls::ScalarType dtype : kDtypes) {
    for (const auto& s : sizes) {
      Tensor a = random_tensor({s[0], s[1]}, dtype, 1), b = random_tensor({s[1], s[2]}, dtype, 2);
      check_matches_naive(native::mm(a, b), a, b);
    }
  }
}

TEST_CASE("mm reads transposed, strided and expanded views") {
  for (ls::ScalarType dtype : kDtypes) {
    Tensor a = random_tensor({5, 7}, dtype, 3), b = random_tensor({7, 4}, dtype, 4);
    Tensor a_t = native::transpose(random_tensor({7, 5}, dtype, 5), 0, 1);  // (5, 7), row stride 1
    Tensor b_t = native::transpose(random_tensor({4, 7}, dtype, 6), 0, 1);  // (7, 4)
    check_matches_naive(native::mm(a_t, b), a_t, b);
    check_matches_naive(native::mm(a, b_t), a, b_t);
    check_matches_naive(native::mm(a_t, b_t), a_t, b_t);
    // Every other column of a (5, 14) tensor: neither stride is 1, so mm copies.
    Tensor wide = random_tensor({5, 14}, dtype, 7);
    Tensor strided = native::as_strided(wide, {5, 7}, {14, 2}, wide.storage_offset());
    check_matches_naive(native::mm(strided, b), strided, b);
    // Rows that overlap (stride 0 after expand) and a narrowed block with a wide row stride.
    Tensor row = random_tensor({1, 7}, dtype, 8);
    Tensor expanded = native::expand(row, {5, 7});
    check_matches_naive(native::mm(expanded, b), expanded, b);
    Tensor block = native::narrow(native::narrow(random_tensor({9, 12}, dtype, 9), 0, 2, 5), 1, 3, 7);
    check_matches_naive(native::mm(block, b), block, b);
  }
}

TEST_CASE("mm leaves its inputs alone and with k == 0 returns zeros") {
  Tensor a = random_tensor({3, 4}), b = random_tensor({4, 2});
  const std::vector<float> a_before = a.to_vector<float>();
  native::mm(a, b);
  CHECK(a.to_vector<float>() == a_before);
  Tensor out = native::mm(native::empty({3, 0}), native::empty({0, 2}));
  CHECK(out.sizes() == IntList{3, 2});
  CHECK(out.to_vector<float>() == std::vector<float>(6, 0.f));
  CHECK(native::mm(native::empty({0, 4}), b).sizes() == IntList{0, 2});
}

TEST_CASE("bmm matches naive loops, also with permuted batches and on two threads") {
  const int threads = ls::get_num_threads();
  for (int t : {1, 2}) {
    ls::set_num_threads(t);
    for (ls::ScalarType dtype : kDtypes) {
      Tensor a = random_tensor({4, 3, 5}, dtype, 10), b = random_tensor({4, 5, 2}, dtype, 11);
      check_matches_naive(native::bmm(a, b), a, b);
      // Transposed matrices and a batch dim that is not the outermost in memory.
      Tensor a_t = native::transpose(random_tensor({4, 5, 3}, dtype, 12), 1, 2);  // (4, 3, 5)
      Tensor b_p = native::transpose(random_tensor({5, 4, 2}, dtype, 13), 0, 1);  // (4, 5, 2)
      check_matches_naive(native::bmm(a_t, b_p), a_t, b_p);
      // Larger matrices take the path where each product uses every thread.
      Tensor big_a = random_tensor({2, 140, 130}, dtype, 14);
      Tensor big_b = random_tensor({2, 130, 150}, dtype, 15);
      check_matches_naive(native::bmm(big_a, big_b), big_a, big_b);
    }
  }
  ls::set_num_threads(threads);
}

TEST_CASE("matmul follows torch.matmul for every rank combination") {
  const IntList shapes[][2] = {
      {{6}, {6}},                    // dot -> 0-d
      {{3, 6}, {6}},                 // matrix-vector
      {{6}, {6, 4}},                 // vector-matrix
      {{3, 6}, {6, 4}},              // mm
      {{2, 3, 6}, {6, 4}},           // batched x matrix: folded into one product
      {{2, 3, 6}, {6}},              // batched x vector
      {{6}, {2, 6, 4}},              // vector x batched
      {{3, 6}, {2, 6, 4}},           // matrix broadcast over b's batch
      {{2, 3, 6}, {2, 6, 4}},        // bmm
      {{2, 1, 3, 4}, {5, 4, 6}},     // broadcast batch dims -> (2, 5, 3, 6)
      {{1, 3, 3, 4}, {2, 1, 4, 2}},  // broadcast on both sides
  };
  for (ls::ScalarType dtype : kDtypes) {
    for (const auto& s : shapes) {
      Tensor a = random_tensor(s[0], dtype, 20), b = random_tensor(s[1], dtype, 21);
      check_matches_naive(native::matmul(a, b), a, b);
    }
  }
  Tensor dot = native::matmul(random_tensor({6}), random_tensor({6}));
  CHECK(dot.dim() == 0);
  CHECK(native::matmul(random_tensor({2, 1, 3, 4}), random_tensor({5, 4, 6})).sizes() ==
        IntList{2, 5, 3, 6});
}

TEST_CASE("matmul reads non-contiguous batched operands") {
  for (ls::ScalarType dtype : kDtypes) {
    // (2, 3, 6) whose rows are not contiguous: folding it needs a copy.
    Tensor a = native::transpose(random_tensor({3, 2, 6}, dtype, 30), 0, 1);
    Tensor w_t = native::transpose(random_tensor({4, 6}, dtype, 31), 0, 1);  // weight.t()
    check_matches_naive(native::matmul(a, w_t), a, w_t);
    // Attention-style: q (B, T, D) x k^T (B, D, T), k^T a transposed view.
    Tensor q = random_tensor({3, 5, 4}, dtype, 32);
    Tensor k_t = native::transpose(random_tensor({3, 5, 4}, dtype, 33), 1, 2);
    check_matches_naive(native::matmul(q, k_t), q, k_t);
    // A broadcast batch dim made with expand (batch stride 0) is read without a copy.
    Tensor shared = native::expand(random_tensor({1, 6, 4}, dtype, 34), {3, 6, 4});
    Tensor x = random_tensor({3, 2, 6}, dtype, 35);
    check_matches_naive(native::matmul(x, shared), x, shared);
    // A strided vector.
    Tensor v = native::as_strided(random_tensor({12}, dtype, 36), {6}, {2}, 0);
    Tensor m = random_tensor({3, 6}, dtype, 37);
    check_matches_naive(native::matmul(m, v), m, v);
    check_matches_naive(native::matmul(v, w_t), v, w_t);
  }
}

TEST_CASE("matmul gives the same result on every gemm backend") {
  const native::GemmBackend saved = native::gemm_backend();
  Tensor a = random_tensor({2, 9, 17}), b = random_tensor({17, 5});
  for (native::GemmBackend backend :
       {native::GemmBackend::Reference, native::GemmBackend::Eigen, native::GemmBackend::OneDNN}) {
    native::set_gemm_backend(backend);
    check_matches_naive(native::matmul(a, b), a, b);
  }
  native::set_gemm_backend(saved);
}

TEST_CASE("mm, bmm and matmul name the op and both shapes when they cannot multiply") {
  CHECK(error_of_op(native::matmul, random_tensor({2, 3}), random_tensor({4, 5})) ==
        "matmul: cannot multiply [2, 3] by [4, 5]: inner dims 3 and 4 differ");
  CHECK(error_of_op(native::mm, random_tensor({2, 3}), random_tensor({4, 5})) ==
        "mm: cannot multiply [2, 3] by [4, 5]: inner dims 3 and 4 differ");
  CHECK(error_of_op(native::matmul, random_tensor({3}), random_tensor({4})) ==
        "matmul: cannot multiply [3] by [4]: inner dims 3 and 4 differ");
  const std::string batch = error_of_op(native::matmul, random_tensor({2, 3, 4}), random_tensor({3, 4, 5}));
  CHECK(batch.find("matmul: cannot multiply [2, 3, 4] by [3, 4, 5]") == 0);
  CHECK(batch.find("do not broadcast") != std::string::npos);
  CHECK(error_of_op(native::bmm, random_tensor({2, 3, 4}), random_tensor({3, 4, 5})) ==
        "bmm: cannot multiply [2, 3, 4] by [3, 4, 5]: batch sizes 2 and 3 differ");
  CHECK(error_of_op(native::mm, random_tensor({2, 3, 4}), random_tensor({4, 5})).find(
            "mm: expected 2-d tensors but got [2, 3, 4] and [4, 5]") == 0);
  CHECK(error_of_op(native::bmm, random_tensor({3, 4}), random_tensor({4, 5})).find(
            "bmm: expected 3-d tensors") == 0);
  CHECK(error_of_op(native::matmul, native::empty({}), random_tensor({4})).find(
            "matmul: cannot multiply [] by [4]: both operands need at least one dim") == 0);
}

TEST_CASE("matmul rejects mixed and non-floating dtypes") {
  const std::string mixed =
      error_of_op(native::matmul, random_tensor({2, 3}, ls::kFloat32), random_tensor({3, 2}, ls::kFloat64));
  CHECK(mixed.find("matmul: dtype mismatch: [2, 3] is float32 but [3, 2] is float64") == 0);
  const std::string ints =
      error_of_op(native::mm, native::zeros({2, 3}, ls::kInt64), native::zeros({3, 2}, ls::kInt64));
  CHECK(ints.find("mm: expected float32 or float64 tensors (or bfloat16) but got int64") == 0);
}
