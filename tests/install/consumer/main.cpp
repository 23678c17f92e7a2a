// Uses the core and autograd parts of docs/api.md through the installed package;
// exits non-zero if a result is wrong. Asks for a CUDA device that does not exist: linked
// with lockstep::cuda (LOCKSTEP_WITH_CUDA) the CUDA library's hooks answer (so its archive
// was linked whole), without it the error names lockstep::cuda (Note [CUDA hooks]).
#include <lockstep.h>

#include <cmath>
#include <iostream>
#include <string>

namespace ls = lockstep;

int main() {
  ls::manual_seed(42);
  ls::set_num_threads(1);
  ls::Tensor a = ls::randn({4, 3});
  ls::Tensor w = ls::randn({3, 2}, ls::requires_grad());
  ls::Tensor loss = ls::matmul(a, w).pow(2.0).mean();
  loss.backward();
  // d mean((a w)^2) / dw = 2/8 * a^T (a w)
  ls::Tensor expected;
  {
    ls::NoGradGuard no_grad;
    expected = ls::matmul(a.t(), ls::matmul(a, w)) * (2.0 / 8.0);
  }
  std::cout << "loss " << loss.item<float>() << "\ngrad " << w.grad() << "\n";
  if (!ls::allclose(w.grad(), expected, 1e-4, 1e-5)) {
    std::cerr << "consumer: gradient mismatch, expected " << expected << "\n";
    return 1;
  }
  int hooks = 0;
  auto h = w.register_post_accumulate_grad_hook([&](ls::Tensor&) { ++hooks; });
  ls::matmul(a, w).sum().backward();
  h.remove();
  if (hooks != 1) return 1;
  std::string err;
  try {
    ls::zeros({1}, ls::TensorOptions().device(ls::Device::cuda(ls::cuda::device_count())));
  } catch (const ls::Error& e) {
    err = e.what();
  }
#if LOCKSTEP_WITH_CUDA
  const char* expected_error = "does not exist";
#else
  const char* expected_error = "link lockstep::cuda";
#endif
  if (err.find(expected_error) == std::string::npos) {
    std::cerr << "consumer: a missing CUDA device gave '" << err << "', expected '" << expected_error << "'\n";
    return 1;
  }
  std::cout << "consumer: ok\n";
  return 0;
}
