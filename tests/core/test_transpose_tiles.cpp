// tests/core/test_transpose_tiles.cpp — the register transposes of
// core/native/fast/transpose_tiles.cpp (Note [Transposing in registers]) against
// the element loop, byte for byte: 2- and 4-byte elements, every size from 0 to
// 40 rows and a spread of column counts (whole tiles, tiles cut by an edge, a
// 7x7 layer's 49 pixels), padded leading dimensions, and guard bytes around
// the destination that must stay untouched. The AVX2 kernels are called
// directly, so an AVX-512 machine checks them too; transpose_block (the widest
// this build has) is checked the same way, and so are the converting transposes
// between bf16 and float32 on random bit patterns (NaNs, infinities, subnormals
// and ties among them).
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "core/native/fast/transpose_tiles.h"

namespace nd = lockstep::native::detail;

namespace {

using lockstep::BFloat16;
using Kernel = bool (*)(const void*, int64_t, void*, int64_t, int64_t, int64_t, int64_t);

// Random bits as an element of type T.
template <class T>
T random_element(std::mt19937& rng) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    BFloat16 b;
    b.bits = static_cast<uint16_t>(rng());
    return b;
  } else if constexpr (std::is_same_v<T, float>) {
    return lockstep::detail::bits_float(static_cast<uint32_t>(rng()));
  } else {
    return static_cast<T>(rng());
  }
}

// d[i * ldd + j] = s[i + j * lds], converted as copy_ converts, the definition.
template <class S, class D>
void element_loop(const S* s, int64_t lds, D* d, int64_t ldd, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      if constexpr (std::is_same_v<S, D>) {
        d[i * ldd + j] = s[i + j * lds];
      } else {
        d[i * ldd + j] = static_cast<D>(static_cast<float>(s[i + j * lds]));
      }
    }
  }
}

// Every shape, both paddings, through kernel(s, lds, d, ldd, rows, cols); returns
// the number of shapes the kernel handled.
template <class S, class D, class Run>
int check_shapes(Run kernel, const char* name) {
  std::mt19937 rng(5);
  int handled = 0;
  for (int64_t rows = 0; rows <= 40; ++rows) {
    for (int64_t cols : {0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 49, 64}) {
      for (int64_t pad : {0, 3}) {
        const int64_t lds = rows + pad, ldd = cols + pad;
        std::vector<S> s(static_cast<size_t>(lds * cols + 1));
        for (S& v : s) v = random_element<S>(rng);
        // The destination with 8 guard elements on each side.
        const size_t n = static_cast<size_t>(ldd * rows) + 16;
        std::vector<D> fast(n), ref;
        std::memset(static_cast<void*>(fast.data()), 0x5a, n * sizeof(D));  // guard bytes
        ref = fast;
        element_loop(s.data(), lds, ref.data() + 8, ldd, rows, cols);
        if (!kernel(s.data(), lds, fast.data() + 8, ldd, rows, cols)) continue;
        ++handled;
        if (std::memcmp(fast.data(), ref.data(), n * sizeof(D)) != 0) {
          FAIL_CHECK(name << ", " << sizeof(S) << " -> " << sizeof(D) << "-byte elements: " << rows
                          << " x " << cols << ", padding " << pad
                          << ": differs from the element loop");
        }
      }
    }
  }
  return handled;
}

template <class T>
int check_kernel(Kernel kernel, const char* name) {
  return check_shapes<T, T>(
      [kernel](const T* s, int64_t lds, T* d, int64_t ldd, int64_t rows, int64_t cols) {
        return kernel(s, lds, d, ldd, rows, cols, sizeof(T));
      },
      name);
}

}  // namespace

#if defined(__AVX2__) && defined(__FMA__)
TEST_CASE("transpose_block_avx2: 8 x 8 register tiles equal the element loop, edges included") {
  CHECK(check_kernel<uint32_t>(nd::transpose_block_avx2, "avx2") > 0);
  CHECK(check_kernel<uint16_t>(nd::transpose_block_avx2, "avx2") > 0);
}

TEST_CASE("transpose_widen_bf16 / transpose_round_bf16: the converting tiles equal the element loop") {
  CHECK(check_shapes<BFloat16, float>(nd::transpose_widen_bf16, "widen") > 0);
  CHECK(check_shapes<float, BFloat16>(nd::transpose_round_bf16, "round") > 0);
}
#endif

TEST_CASE("transpose_block: the build's widest kernel equals the element loop, edges included") {
  const int four = check_kernel<uint32_t>(nd::transpose_block, "transpose_block");
  const int two = check_kernel<uint16_t>(nd::transpose_block, "transpose_block");
  // It handles every shape exactly when it says it has a kernel for the size.
  CHECK((four > 0) == nd::transpose_block_available(4));
  CHECK((two > 0) == nd::transpose_block_available(2));
}
