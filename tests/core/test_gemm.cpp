// tests/core/test_gemm.cpp — every GEMM backend against the reference loops.
//
// The reference is checked on a product worked by hand; then Eigen and oneDNN
// must match it for every transpose combination, odd sizes, leading dims wider
// than the matrices (the padding must stay untouched), alpha/beta, beta == 0
// over NaNs, k == 0, batched products and two threads.
// Read before: core/native/gemm.h.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/native/gemm.h"
#include "core/parallel.h"

namespace ls = lockstep;
using ls::native::GemmBackend;

namespace {

const GemmBackend kFastBackends[] = {GemmBackend::Eigen, GemmBackend::OneDNN};

// A row-major (rows, cols) matrix inside a buffer with leading dim ld >= cols;
// the padding columns hold a sentinel so tests can see they are never written.
template <class T>
struct Matrix {
  int64_t rows, cols, ld;
  std::vector<T> data;
  static constexpr T kSentinel = T(-777);
  Matrix(int64_t r, int64_t c, int64_t pad, std::mt19937& rng)
      : rows(r), cols(c), ld(std::max<int64_t>(1, c + pad)),
        data(static_cast<size_t>(std::max<int64_t>(1, r * ld)), kSentinel) {
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) data[i * ld + j] = T(uniform(rng));
    }
  }
  T& at(int64_t i, int64_t j) { return data[i * ld + j]; }
};

template <class T>
double tolerance(int64_t k) {
  return (std::is_same_v<T, float> ? 2e-5 : 1e-12) * static_cast<double>(k + 1);
}

// Runs one product with `backend` and with the reference on copies of the same
// C, then compares every element (padding included: both must leave it alone).
template <class T>
void check_against_reference(GemmBackend backend, bool trans_a, bool trans_b, int64_t m,
                             int64_t n, int64_t k, int64_t pad, T alpha, T beta) {
  std::mt19937 rng(static_cast<unsigned>(m * 1000003 + n * 1009 + k * 17 + pad));
  Matrix<T> a(trans_a ? k : m, trans_a ? m : k, pad, rng);
  Matrix<T> b(trans_b ? n : k, trans_b ? k : n, pad, rng);
  Matrix<T> c(m, n, pad, rng);
  Matrix<T> expected = c;
  ls::native::gemm_with(backend, trans_a, trans_b, m, n, k, alpha, a.data.data(), a.ld,
                        b.data.data(), b.ld, beta, c.data.data(), c.ld);
  ls::native::gemm_reference(trans_a, trans_b, m, n, k, alpha, a.data.data(), a.ld,
                             b.data.data(), b.ld, beta, expected.data.data(), expected.ld);
  for (size_t i = 0; i < c.data.size(); ++i) {
    if (std::abs(double(c.data[i]) - double(expected.data[i])) > tolerance<T>(k)) {
      FAIL(ls::detail::str(ls::native::gemm_backend_name(backend), " differs from the reference at element ", i,
           ": ", c.data[i], " vs ", expected.data[i], " (trans_a=", trans_a,
           " trans_b=", trans_b, " m=", m, " n=", n, " k=", k, " pad=", pad, " alpha=", alpha,
           " beta=", beta, ")"));
    }
  }
}

// Restores the process-wide backend and thread count when a test ends.
struct GemmStateGuard {
  GemmBackend backend = ls::native::gemm_backend();
  int threads = ls::get_num_threads();
  ~GemmStateGuard() {
    ls::native::set_gemm_backend(backend);
    ls::set_num_threads(threads);
  }
};

}  // namespace

TEST_CASE_TEMPLATE("gemm_reference computes a product worked by hand", T, float, double) {
  // A = [[1, 2, 3], [4, 5, 6]], B = [[1, 0], [0, 1], [2, -1]]: A B = [[7, -1], [16, -1]].
  const std::vector<T> a = {1, 2, 3, 4, 5, 6};
  const std::vector<T> a_t = {1, 4, 2, 5, 3, 6};  // A stored as its (3, 2) transpose
  const std::vector<T> b = {1, 0, 0, 1, 2, -1};
  const std::vector<T> b_t = {1, 0, 2, 0, 1, -1};  // B stored as its (2, 3) transpose
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      CAPTURE(trans_a);
      CAPTURE(trans_b);
      std::vector<T> c = {1, 1, 1, 1};
      // C = 2 * A B + 0.5 * C
      ls::native::gemm_reference<T>(trans_a, trans_b, 2, 2, 3, T(2), (trans_a ? a_t : a).data(),
                                    trans_a ? 2 : 3, (trans_b ? b_t : b).data(), trans_b ? 3 : 2,
                                    T(0.5), c.data(), 2);
      CHECK(c == std::vector<T>{14.5, -1.5, 32.5, -1.5});
    }
  }
}

TEST_CASE_TEMPLATE("gemm backends match the reference for every transpose and odd sizes", T,
                   float, double) {
  const int64_t sizes[][3] = {{1, 1, 1},   {1, 7, 33},   {7, 1, 65},  {33, 65, 7},
                              {65, 33, 1}, {64, 64, 64}, {130, 17, 129}};
  for (GemmBackend backend : kFastBackends) {
    for (bool trans_a : {false, true}) {
      for (bool trans_b : {false, true}) {
        for (const auto& s : sizes) {
          for (int64_t pad : {0, 3}) {
            check_against_reference<T>(backend, trans_a, trans_b, s[0], s[1], s[2], pad, T(1),
                                       T(0));
          }
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("gemm backends honour alpha and beta", T, float, double) {
  const T scalars[][2] = {{T(0.5), T(2)}, {T(-1.5), T(1)}, {T(1), T(-0.25)}, {T(0), T(3)}};
  for (GemmBackend backend : kFastBackends) {
    for (const auto& ab : scalars) {
      for (bool trans : {false, true}) {
        check_against_reference<T>(backend, trans, !trans, 33, 17, 65, 2, ab[0], ab[1]);
      }
    }
  }
}

TEST_CASE_TEMPLATE("gemm with beta == 0 never reads C, so NaNs there vanish", T, float, double) {
  const T nan = std::numeric_limits<T>::quiet_NaN();
  for (GemmBackend backend : {GemmBackend::Reference, GemmBackend::Eigen, GemmBackend::OneDNN}) {
    CAPTURE(ls::native::gemm_backend_name(backend));
    const std::vector<T> a = {1, 2, 3, 4}, b = {1, 1, 1, 1};
    std::vector<T> c(4, nan);
    ls::native::gemm_with<T>(backend, false, false, 2, 2, 2, T(1), a.data(), 2, b.data(), 2, T(0),
                             c.data(), 2);
    CHECK(c == std::vector<T>{3, 3, 7, 7});
  }
}

TEST_CASE_TEMPLATE("gemm with k == 0 scales C by beta", T, float, double) {
  for (GemmBackend backend : {GemmBackend::Reference, GemmBackend::Eigen, GemmBackend::OneDNN}) {
    CAPTURE(ls::native::gemm_backend_name(backend));
    const T unused = 0;
    std::vector<T> c = {1, 2, 3, 4, 5, 6};
    ls::native::gemm_with<T>(backend, false, false, 2, 3, 0, T(1), &unused, 1, &unused, 3, T(2),
                             c.data(), 3);
    CHECK(c == std::vector<T>{2, 4, 6, 8, 10, 12});
    ls::native::gemm_with<T>(backend, false, false, 2, 3, 0, T(1), &unused, 1, &unused, 3, T(0),
                             c.data(), 3);
    CHECK(c == std::vector<T>(6, T(0)));
  }
}

TEST_CASE("gemm rejects leading dims narrower than the matrix, naming them") {
  std::vector<float> a(64), b(64), c(64);
  auto message = [&](bool trans_a, int64_t lda, int64_t ldb, int64_t ldc) {
    try {
      ls::native::gemm<float>(trans_a, false, 4, 5, 3, 1.f, a.data(), lda, b.data(), ldb, 0.f,
                              c.data(), ldc);
    } catch (const ls::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message(false, 2, 5, 5).find("lda=2 is smaller than the stored width 3") !=
        std::string::npos);
  CHECK(message(true, 3, 5, 5).find("lda=3 is smaller than the stored width 4") !=
        std::string::npos);
  CHECK(message(false, 3, 4, 5).find("ldb=4") != std::string::npos);
  CHECK(message(false, 3, 5, 4).find("ldc=4 is smaller than n=5") != std::string::npos);
  CHECK_THROWS_AS(ls::native::gemm<float>(false, false, -1, 5, 3, 1.f, a.data(), 3, b.data(), 5,
                                          0.f, c.data(), 5),
                  ls::Error);
}

TEST_CASE("set_gemm_backend chooses what gemm runs") {
  GemmStateGuard guard;
  for (GemmBackend backend : {GemmBackend::Reference, GemmBackend::Eigen, GemmBackend::OneDNN}) {
    ls::native::set_gemm_backend(backend);
    CHECK(ls::native::gemm_backend() == backend);
    std::mt19937 rng(7);
    Matrix<float> a(9, 11, 0, rng), b(11, 5, 0, rng), c(9, 5, 0, rng), expected = c;
    ls::native::gemm<float>(false, false, 9, 5, 11, 1.f, a.data.data(), a.ld, b.data.data(),
                            b.ld, 0.f, c.data.data(), c.ld);
    ls::native::gemm_reference<float>(false, false, 9, 5, 11, 1.f, a.data.data(), a.ld,
                                      b.data.data(), b.ld, 0.f, expected.data.data(), expected.ld);
    for (size_t i = 0; i < c.data.size(); ++i) CHECK(c.data[i] == doctest::Approx(expected.data[i]));
  }
  CHECK(std::string(ls::native::gemm_backend_name(GemmBackend::OneDNN)) == "onednn");
  CHECK(std::string(ls::native::gemm_backend_name(GemmBackend::Eigen)) == "eigen");
  CHECK(std::string(ls::native::gemm_backend_name(GemmBackend::Reference)) == "reference");
}

TEST_CASE_TEMPLATE("gemm backends match the reference on two threads", T, float, double) {
  GemmStateGuard guard;
  ls::set_num_threads(2);
  for (GemmBackend backend : kFastBackends) {
    check_against_reference<T>(backend, false, false, 300, 200, 150, 1, T(1), T(0));
    check_against_reference<T>(backend, true, true, 257, 129, 300, 0, T(0.5), T(1));
  }
}

TEST_CASE_TEMPLATE("gemm_batched runs each product at its offsets, sharing inputs", T, float,
                   double) {
  GemmStateGuard guard;
  // Four (5, 6) x (6, 3) products: A is shared by products 0/1 and 2/3 (a broadcast
  // batch dim), each B and C is its own.
  const int64_t m = 5, n = 3, k = 6, batch = 4;
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::vector<T> a(2 * m * k), b(batch * k * n);
  for (T& x : a) x = T(uniform(rng));
  for (T& x : b) x = T(uniform(rng));
  const std::vector<int64_t> a_off = {0, 0, m * k, m * k};
  const std::vector<int64_t> b_off = {0, k * n, 2 * k * n, 3 * k * n};
  const std::vector<int64_t> c_off = {0, m * n, 2 * m * n, 3 * m * n};
  std::vector<T> expected(batch * m * n);
  for (int64_t i = 0; i < batch; ++i) {
    ls::native::gemm_reference<T>(false, false, m, n, k, T(1), a.data() + a_off[i], k,
                                  b.data() + b_off[i], n, T(0), expected.data() + c_off[i], n);
  }
  for (int threads : {1, 2}) {
    for (GemmBackend backend : {GemmBackend::Reference, GemmBackend::Eigen, GemmBackend::OneDNN}) {
      CAPTURE(threads);
      CAPTURE(ls::native::gemm_backend_name(backend));
      ls::set_num_threads(threads);
      ls::native::set_gemm_backend(backend);
      std::vector<T> c(batch * m * n, T(0));
      ls::native::gemm_batched<T>(batch, false, false, m, n, k, T(1), a.data(), a_off.data(), k,
                                  b.data(), b_off.data(), n, T(0), c.data(), c_off.data(), n);
      for (size_t i = 0; i < c.size(); ++i) {
        CHECK(std::abs(double(c[i]) - double(expected[i])) <= tolerance<T>(k));
      }
    }
  }
}
