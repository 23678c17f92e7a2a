// core/native/reference/matmul.cpp — the matrix product, three loops
// (Note [Plain reference kernels]). core/native/gemm.cpp's gemm_reference is
// the same loops on raw buffers, the oracle of the GEMM backends; this one is
// on tensors, the oracle of mm/matmul in every dtype (bf16 included).
// Read before: core/native/reference/conv2d.cpp. Read next:
// core/native/reference/normalization.cpp.
#include <vector>

#include "core/factory.h"
#include "core/native/reference/reference.h"

namespace lockstep::native::reference {

Tensor mm(const Tensor& a, const Tensor& b) {
  const int64_t n = a.size(0), k = a.size(1), m = b.size(1);
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> c(static_cast<size_t>(n * m), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j)
      for (int64_t p = 0; p < k; ++p) c[i * m + j] += av[i * k + p] * bv[p * m + j];
  return tensor(c, {n, m});
}

}  // namespace lockstep::native::reference
