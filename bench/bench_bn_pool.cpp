// bench/bench_bn_pool.cpp — a ResNet's stem end, max_pool2d(relu(bn1(x))), as one kernel
// (batch_norm_relu_max_pool2d_forward / _backward: Note [Stem batch norm, ReLU and max-pool
// in one pass] in core/native/fast/batch_norm_relu_pool_bf16_nhwc.cpp) against the two ops it
// replaces (batch_norm_relu, then max_pool2d; backward, max_pool2d's, then batch norm's with
// the ReLU's mask from the input), on ResNet50's stem activation (batch 8, 64 channels,
// 112x112, bf16 channels-last; the 3x3 stride-2 pool with padding 1), caches flushed before
// each call as in a training step.
//
// Each rep times the four passes (fused forward, fused backward, two-op forward, two-op
// backward) one after the other, so both see the same minutes of the machine; one JSON line
// with the median ms of each and the fused / two-op ratio.
//
//   build/bin/bench_bn_pool [--threads T] [--reps N] [--batch B]
//
// Read before: core/native/batch_norm_relu_pool.h, bench/bench_bn_pair.cpp.
// Read next: docs/results/bf16.md.
#include <array>
#include <cstdio>
#include <tuple>
#include <vector>

#include "bench/bench_cold.h"
#include "core/factory.h"
#include "core/native/batch_norm_relu_pool.h"
#include "core/native/fused_relu.h"
#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/native/nn_kernels.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "tools/cli.h"

namespace {

namespace ls = lockstep;
namespace native = lockstep::native;

struct Options {
  int threads = 1;
  int reps = 9;
  int batch = 8;
};

Options parse(int argc, char** argv) {
  Options o;
  ls::cli::Program p("bench_bn_pool",
                     "max_pool2d(relu(bn(x))) as one bf16 channels-last kernel against "
                     "batch_norm_relu then max_pool2d, on ResNet50's stem; JSON, one line.");
  p.threads(o.threads);
  p.integer("--reps", o.reps, "timed repetitions", 1, 100000);
  p.integer("--batch", o.batch, "images (ResNet50 at 224x224: the stem is (B, 64, 112, 112))", 1,
            256);
  p.parse(argc, argv);
  return o;
}

}  // namespace

int run_main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  ls::set_num_threads(opt.threads);
  ls::manual_seed(0);
  const int64_t c = 64;
  const ls::IntList kernel{3, 3}, stride{2, 2}, padding{1, 1};
  // (B, 64, 112, 112) channels-last bf16, and the pooled (B, 64, 56, 56) gradient
  const ls::Tensor x =
      native::channels_last(native::to_dtype(ls::randn({opt.batch, c, 112, 112}), ls::kBFloat16));
  const ls::Tensor gy =
      native::channels_last(native::to_dtype(ls::randn({opt.batch, c, 56, 56}), ls::kBFloat16));
  const native::BatchNormTensors bn{ls::randn({c}), ls::randn({c}), ls::zeros({c}), ls::ones({c})};
  const std::array<bool, 3> all = {true, true, true};
  native::BatchNormReluPoolForward f;
  ls::Tensor y, mean, invstd, pooled, idx;
  auto fused_fwd = [&] {
    f = native::batch_norm_relu_max_pool2d_forward(x, bn, true, 0.1, 1e-5, kernel, stride, padding);
  };
  auto fused_bwd = [&] {
    native::batch_norm_relu_max_pool2d_backward(gy, x, bn.weight, bn.bias, f.save_mean,
                                                f.save_invstd, f.argmax, kernel, stride, padding,
                                                true, all);
  };
  auto two_fwd = [&] {
    std::tie(y, mean, invstd) = native::batch_norm_relu_forward(
        x, bn.weight, bn.bias, bn.running_mean, bn.running_var, true, 0.1, 1e-5);
    std::tie(pooled, idx) = native::max_pool2d_forward(y, kernel, stride, padding);
  };
  auto two_bwd = [&] {
    const ls::Tensor g = native::max_pool2d_backward(gy, idx, x.sizes());
    native::batch_norm_relu_backward_from_input(g, x, bn.weight, bn.bias, mean, invstd, true, true,
                                                true, true);
  };
  fused_fwd();  // warm-up, and the operands of the first backward
  two_fwd();
  const std::array<double, 4> m =
      lockstep::bench::cold_medians<4>(opt.reps, {fused_fwd, fused_bwd, two_fwd, two_bwd});
  std::printf(
      "{\"bench\":\"bn_pool\",\"threads\":%d,\"reps\":%d,\"batch\":%d,\"fused_fwd_ms\":%.3f,"
      "\"fused_bwd_ms\":%.3f,\"two_ops_fwd_ms\":%.3f,\"two_ops_bwd_ms\":%.3f,"
      "\"fused_over_two_ops\":%.3f}\n",
      opt.threads, opt.reps, opt.batch, m[0], m[1], m[2], m[3], (m[0] + m[1]) / (m[2] + m[3]));
  return 0;
}

int main(int argc, char** argv) {
  return lockstep::cli::run("bench_bn_pool", [&] { return run_main(argc, argv); });
}
