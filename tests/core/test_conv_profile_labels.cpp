// tests/core/test_conv_profile_labels.cpp — Note [Convolution profile labels]:
// with the profiler on, each oneDNN convolution pass records a row named by its
// pass, kernel, stride, channels, output size and batch, and the layout
// reorders around it get rows of their own.
// Read before: core/native/fast/conv_onednn.h, core/profiler.h.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/native/fast/conv_onednn.h"
#include "core/native/nn_kernels.h"
#include "core/parallel.h"
#include "core/profiler.h"
#include "core/rng.h"

namespace ls = lockstep;
namespace native = lockstep::native;
using ls::IntList;
using ls::Tensor;
using native::ConvBackend;

namespace {

// The profiler rows whose name contains `part`.
int rows_with(const std::string& part) {
  int n = 0;
  for (const auto& e : ls::profiler::entries()) n += e.name.find(part) != std::string::npos;
  return n;
}

}  // namespace

TEST_CASE("conv profile labels: rows name the pass, kernel, stride, channels and output size") {
  ls::manual_seed(8);
  const ConvBackend saved = native::conv_backend();
  native::set_conv_backend(ConvBackend::OneDNN);
  Tensor x = ls::randn({2, 16, 14, 14}), w = ls::randn({24, 16, 3, 3});
  ls::profiler::reset();
  ls::profiler::enable();
  const Tensor y = native::conv2d_forward(x, w, {}, {2, 2}, {1, 1}, {1, 1}, 1);
  native::conv2d_backward(ls::ones(y.sizes()), x, w, {2, 2}, {1, 1}, {1, 1}, 1, true, true, false);
  ls::profiler::disable();
  CHECK(rows_with("conv fwd 3x3s2 16->24 @7x7 b2 ") == 1);
  CHECK(rows_with("conv bwd-d 3x3s2 16->24 @7x7 b2 ") == 1);
  CHECK(rows_with("conv bwd-w 3x3s2 16->24 @7x7 b2 ") == 1);
  CHECK(rows_with("conv2d.reorder src") == 1);  // the blocked kernels' input, forward and weights
  ls::profiler::reset();
  native::set_conv_backend(saved);
}
