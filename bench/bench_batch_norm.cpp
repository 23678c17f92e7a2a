// bench/bench_batch_norm.cpp — the batch-norm kernels at every ResNet50 shape
// (batch 8, 224x224 images), forward and backward, with the caches flushed
// before each call as in a training step, where every activation comes from
// memory.
//
// Kinds: bn_relu (batch_norm_relu, the 33 BatchNorm + ReLU pairs of a step; its
// backward as the step runs it, batch_norm_relu_backward_from_input),
// bn_add_relu (batch_norm_add_relu, the 16 residual blocks' last BatchNorm +
// add + ReLU) and bn (batch_norm, the 4 downsample branches). For each
// (kind, shape) it prints the median wall ms of the forward and the backward
// over --reps calls, and the bandwidth those imply for the bytes the kernel must
// move at least (forward: read x [and the residual], write y; backward: read
// grad, x [and y for bn_add_relu], write grad_input [and the residual's gradient]). The summary
// line weighs each shape by how often a ResNet50 step runs it: the batch-norm
// ms of one step, and its bandwidth.
//
//   build/bin/bench_batch_norm [--threads T] [--reps N]
//
// Read before: core/native/batch_norm.cpp. Read next: docs/results/cpu_step.md.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tools/cli.h"
#include "core/factory.h"
#include "core/native/fused_relu.h"
#include "core/native/nn_kernels.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "bench/bench_cold.h"
#include "bench/bench_stats.h"

namespace {

namespace ls = lockstep;
namespace native = lockstep::native;

enum class Kind { BnRelu, BnAddRelu, Bn };

struct Shape {
  Kind kind;
  int64_t c, hw;  // channels, spatial side
  int per_step;   // calls of this (kind, shape) in one ResNet50 step
};

// ResNet50's batch norms: the stem, then per stage the blocks' BN+ReLU pairs,
// the blocks' last BN+add+ReLU, and the downsample branch's BN.
const std::vector<Shape> kShapes = {
    {Kind::BnRelu, 64, 112, 1},     {Kind::BnRelu, 64, 56, 6},    {Kind::BnRelu, 128, 56, 1},
    {Kind::BnRelu, 128, 28, 7},     {Kind::BnRelu, 256, 28, 1},   {Kind::BnRelu, 256, 14, 11},
    {Kind::BnRelu, 512, 14, 1},     {Kind::BnRelu, 512, 7, 5},    {Kind::BnAddRelu, 256, 56, 3},
    {Kind::BnAddRelu, 512, 28, 4},  {Kind::BnAddRelu, 1024, 14, 6}, {Kind::BnAddRelu, 2048, 7, 3},
    {Kind::Bn, 256, 56, 1},         {Kind::Bn, 512, 28, 1},       {Kind::Bn, 1024, 14, 1},
    {Kind::Bn, 2048, 7, 1},
};

const char* kind_name(Kind k) {
  return k == Kind::BnRelu ? "bn_relu" : k == Kind::BnAddRelu ? "bn_add_relu" : "bn";
}

// Tensors of the shape's size each pass moves at least: (forward, backward).
std::pair<int, int> tensors_moved(Kind k) {
  if (k == Kind::BnRelu) return {2, 3};     // x -> y; g, x -> gx (mask from x)
  if (k == Kind::BnAddRelu) return {3, 5};  // x, r -> y; g, x, y -> gx, gr
  return {2, 3};                            // x -> y; g, x -> gx
}

struct Options {
  int threads = 1;
  int reps = 9;
};

Options parse(int argc, char** argv) {
  Options o;
  ls::cli::Program p("bench_batch_norm", "The batch-norm kernels (plain, + ReLU, + add + ReLU) at every ResNet50 "
                                         "shape, caches flushed; JSON lines, the last a summary.");
  p.threads(o.threads);
  p.integer("--reps", o.reps, "timed repetitions per shape", 1, 100000);
  p.parse(argc, argv);
  return o;
}

using lockstep::bench::cold_ms;  // bench/bench_cold.h
using lockstep::bench::median;   // bench/bench_stats.h

}  // namespace

int run_main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  ls::set_num_threads(opt.threads);
  ls::manual_seed(0);
  constexpr int64_t kBatch = 8;
  double step_ms = 0, step_bytes = 0;
  for (const Shape& sh : kShapes) {
    const ls::Tensor x = ls::randn({kBatch, sh.c, sh.hw, sh.hw});  // (N, C, H, W)
    const ls::Tensor r = ls::randn(x.sizes());                      // (N, C, H, W) residual
    const ls::Tensor gy = ls::randn(x.sizes());                     // (N, C, H, W)
    const ls::Tensor w = ls::randn({sh.c}), b = ls::randn({sh.c});  // (C)
    const ls::Tensor rm = ls::zeros({sh.c}), rv = ls::ones({sh.c});  // (C)
    auto forward = [&] {
      if (sh.kind == Kind::BnRelu) return native::batch_norm_relu_forward(x, w, b, rm, rv, true, 0.1, 1e-5);
      if (sh.kind == Kind::BnAddRelu) {
        return native::batch_norm_add_relu_forward(x, r, w, b, rm, rv, true, 0.1, 1e-5);
      }
      return native::batch_norm_forward(x, w, b, rm, rv, true, 0.1, 1e-5);
    };
    const auto [y, mean, invstd] = forward();
    auto backward = [&] {
      if (sh.kind == Kind::BnRelu) {
        native::batch_norm_relu_backward_from_input(gy, x, w, b, mean, invstd, true, true, true,
                                                    true);
      } else if (sh.kind == Kind::BnAddRelu) {
        native::batch_norm_add_relu_backward(gy, x, w, mean, invstd, y, true, true, true, true);
      } else {
        native::batch_norm_backward(gy, x, w, mean, invstd, true, true, true, true);
      }
    };
    backward();  // warm-up
    std::vector<double> fwd, bwd;
    for (int rep = 0; rep < opt.reps; ++rep) {
      fwd.push_back(cold_ms(forward));
      bwd.push_back(cold_ms(backward));
    }
    const double f = median(fwd), g = median(bwd);
    const double bytes = double(x.numel()) * 4;
    const auto [nf, nb] = tensors_moved(sh.kind);
    std::printf(
        "{\"kind\":\"%s\",\"c\":%lld,\"hw\":%lld,\"mb\":%.1f,\"fwd_ms\":%.3f,\"bwd_ms\":%.3f,"
        "\"fwd_gbs\":%.1f,\"bwd_gbs\":%.1f,\"per_step\":%d}\n",
        kind_name(sh.kind), static_cast<long long>(sh.c), static_cast<long long>(sh.hw),
        bytes / 1e6, f, g, nf * bytes / f / 1e6, nb * bytes / g / 1e6, sh.per_step);
    step_ms += sh.per_step * (f + g);
    step_bytes += sh.per_step * (nf + nb) * bytes;
  }
  std::printf("{\"summary\":true,\"threads\":%d,\"reps\":%d,\"step_ms\":%.1f,\"step_gbs\":%.1f}\n",
              opt.threads, opt.reps, step_ms, step_bytes / step_ms / 1e6);
  return 0;
}

int main(int argc, char** argv) {
  return lockstep::cli::run("bench_batch_norm", [&] { return run_main(argc, argv); });
}
