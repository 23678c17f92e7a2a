// bench/bench_bn_pair.cpp — a downsampling ResNet50 block's end, relu(bn3(x) + bn_d(r)),
// as one kernel (batch_norm_pair_forward / _backward: Note [Downsample batch norm
// folded] in core/native/fast/batch_norm_bf16_nhwc_pair.cpp) against the two ops it
// replaces (batch_norm, then batch_norm_add_relu with its mask in bits), on bf16
// channels-last activations at the four downsample shapes (batch 8, 224x224 images),
// caches flushed before each call as in a training step.
//
// Each rep times the four passes (pair forward, pair backward, two-op forward, two-op
// backward) one after the other, so both see the same minutes of the machine; one
// JSON line per shape with the median ms of each, then a summary with the sums over
// the four shapes (each runs once per ResNet50 step): the batch-norm ms per step the
// fold saves.
//
//   build/bin/bench_bn_pair [--threads T] [--reps N]
//
// Read before: core/native/batch_norm_pair.h. Read next: docs/results/bf16.md.
#include <array>
#include <cstdio>
#include <tuple>
#include <vector>

#include "bench/bench_cold.h"
#include "core/factory.h"
#include "core/native/batch_norm_pair.h"
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

struct Shape {
  int64_t c, hw;  // channels, spatial side
};
const std::vector<Shape> kShapes = {{256, 56}, {512, 28}, {1024, 14}, {2048, 7}};

struct Options {
  int threads = 1;
  int reps = 9;
};

Options parse(int argc, char** argv) {
  Options o;
  ls::cli::Program p("bench_bn_pair",
                     "relu(bn(x) + bn(r)) as one bf16 channels-last kernel against "
                     "batch_norm then batch_norm_add_relu, ResNet50's downsample "
                     "shapes; JSON lines, the last a summary.");
  p.threads(o.threads);
  p.integer("--reps", o.reps, "timed repetitions per shape", 1, 100000);
  p.parse(argc, argv);
  return o;
}

ls::Tensor cl_bf16(const ls::IntList& sizes) {  // (N, C, H, W) channels-last bf16
  return native::channels_last(native::to_dtype(ls::randn(sizes), ls::kBFloat16));
}

}  // namespace

int run_main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  ls::set_num_threads(opt.threads);
  ls::manual_seed(0);
  const std::array<bool, 6> all = {true, true, true, true, true, true};
  double sums[4] = {0, 0, 0, 0};  // pair fwd, pair bwd, two-op fwd, two-op bwd
  for (const Shape& sh : kShapes) {
    const ls::IntList sizes{8, sh.c, sh.hw, sh.hw};
    const ls::Tensor x = cl_bf16(sizes), r = cl_bf16(sizes), gy = cl_bf16(sizes);
    const native::BatchNormTensors bn{ls::randn({sh.c}), ls::randn({sh.c}), ls::zeros({sh.c}),
                                      ls::ones({sh.c})};
    const native::BatchNormTensors rbn{ls::randn({sh.c}), ls::randn({sh.c}), ls::zeros({sh.c}),
                                       ls::ones({sh.c})};
    ls::Tensor bits, bits2, yr, r_mean, r_invstd;
    native::BatchNormPairForward f;
    std::tuple<ls::Tensor, ls::Tensor, ls::Tensor> two;  // batch_norm_add_relu's (y, mean, invstd)
    auto pair_fwd = [&] {
      f = native::batch_norm_pair_forward(x, bn, r, rbn, true, 0.1, 1e-5, &bits);
    };
    auto pair_bwd = [&] {
      native::batch_norm_pair_backward(gy, x, bn.weight, f.save_mean, f.save_invstd, r, rbn.weight,
                                       f.residual_save_mean, f.residual_save_invstd, bits, true,
                                       true, all);
    };
    auto two_fwd = [&] {
      std::tie(yr, r_mean, r_invstd) = native::batch_norm_forward(
          r, rbn.weight, rbn.bias, rbn.running_mean, rbn.running_var, true, 0.1, 1e-5);
      two = native::batch_norm_add_relu_forward(x, yr, bn.weight, bn.bias, bn.running_mean,
                                                bn.running_var, true, 0.1, 1e-5, &bits2);
    };
    auto two_bwd = [&] {
      auto [gi, gw, gb, gm] = native::batch_norm_add_relu_backward_bits(
          gy, x, bn.weight, std::get<1>(two), std::get<2>(two), bits2, true, true, true, true);
      native::batch_norm_backward(gm, r, rbn.weight, r_mean, r_invstd, true, true, true, true);
    };
    pair_fwd();  // warm-up, and the operands of the first backward
    two_fwd();
    const std::array<double, 4> m =
        lockstep::bench::cold_medians<4>(opt.reps, {pair_fwd, pair_bwd, two_fwd, two_bwd});
    for (int k = 0; k < 4; ++k) sums[k] += m[k];
    std::printf(
        "{\"c\":%lld,\"hw\":%lld,\"pair_fwd_ms\":%.3f,\"pair_bwd_ms\":%.3f,\"two_ops_fwd_ms\":%.3f,"
        "\"two_ops_bwd_ms\":%.3f}\n",
        static_cast<long long>(sh.c), static_cast<long long>(sh.hw), m[0], m[1], m[2], m[3]);
  }
  std::printf(
      "{\"summary\":true,\"threads\":%d,\"reps\":%d,\"pair_ms\":%.2f,\"two_ops_ms\":%.2f,"
      "\"pair_over_two_ops\":%.3f}\n",
      opt.threads, opt.reps, sums[0] + sums[1], sums[2] + sums[3],
      (sums[0] + sums[1]) / (sums[2] + sums[3]));
  return 0;
}

int main(int argc, char** argv) {
  return lockstep::cli::run("bench_bn_pair", [&] { return run_main(argc, argv); });
}
