// bench/bench_conv.cpp — conv2d forward and backward time, reference (im2col + GEMM)
// against oneDNN, on the Fashion-MNIST CNN's layers and a few ResNet50 layers.
//
// Layers: the small CNN of models/small_cnn.cpp at batch 64 (conv1 1->32 and
// conv2 32->64, 3x3, padding 1, at 28x28 and 14x14) and ResNet50 at batch 8 with
// 224x224 images (the 7x7 stride-2 stem, a 3x3 64->64 at 56x56, a 1x1 256->64 at
// 56x56, a 3x3 512->512 at 7x7). Passes: forward (with bias where the model
// has one), backward-data (grad_input), backward-weights (grad_weight, and
// grad_bias where there is a bias). A third configuration, "onednn_winograd",
// is oneDNN with ConvWinograd::Force (Note [Winograd convolutions] in
// core/native/fast/conv_winograd.cpp): the 3x3 stride-1 layers, including all of
// ResNet50's (64 @ 56, 128 @ 28, 256 @ 14, 512 @ 7), run Winograd where oneDNN
// implements it; the *_impl fields say which passes did. float32; each rep
// times every pass once per configuration, alternating, and the medians are
// reported: wall-clock ms
// and, as *_cpu_ms, the calling thread's CPU time, which on a shared machine
// leaves out the time other processes held the core (it is the whole cost only
// with --threads 1; the speedups in the summary use it then, wall time otherwise).
// One JSON line per (layer, configuration), then a summary line with the
// speedups of oneDNN (direct) over the reference and of Winograd over direct.
//
//   build/bin/bench_conv [--threads T] [--reps N] [--layer NAME]
//
// Read before: core/native/fast/conv_onednn.h. Read next: docs/results/ (conv numbers).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "tools/cli.h"
#include "core/factory.h"
#include "core/native/fast/conv_onednn.h"
#include "core/native/nn_kernels.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "bench/bench_stats.h"

namespace {

namespace ls = lockstep;
namespace native = lockstep::native;
using native::ConvBackend;

struct Layer {
  const char* name;
  int64_t n, c_in, h, w, c_out, k, stride, pad;
  bool bias;
};

const std::vector<Layer> kLayers = {
    {"fmnist_conv1", 64, 1, 28, 28, 32, 3, 1, 1, true},
    {"fmnist_conv2", 64, 32, 14, 14, 64, 3, 1, 1, true},
    {"resnet_stem_7x7s2", 8, 3, 224, 224, 64, 7, 2, 3, false},
    {"resnet_3x3_64_56", 8, 64, 56, 56, 64, 3, 1, 1, false},
    {"resnet_3x3_128_28", 8, 128, 28, 28, 128, 3, 1, 1, false},
    {"resnet_3x3_256_14", 8, 256, 14, 14, 256, 3, 1, 1, false},
    {"resnet_1x1_256to64_56", 8, 256, 56, 56, 64, 1, 1, 0, false},
    {"resnet_3x3_512_7", 8, 512, 7, 7, 512, 3, 1, 1, false},
};

struct Options {
  int threads = 1;
  int reps = 7;
  std::string layer;
};

Options parse(int argc, char** argv) {
  Options o;
  ls::cli::Program p("bench_conv", "Convolution layers, reference (im2col + GEMM) vs oneDNN direct and Winograd; "
                                   "JSON lines, the last a summary.");
  p.threads(o.threads);
  p.integer("--reps", o.reps, "timed repetitions per layer and pass", 1, 100000);
  std::vector<std::string> names;
  for (const Layer& l : kLayers) names.push_back(l.name);
  p.choice("--layer", o.layer, "time this layer only (default: all)", names)->default_str("");
  p.parse(argc, argv);
  return o;
}

using lockstep::bench::median;  // bench/bench_stats.h

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

// (wall ms, this thread's CPU ms) of one call of fn.
template <class F>
std::pair<double, double> time_ms(F&& fn) {
  const double c0 = thread_cpu_ms();
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  const auto t1 = std::chrono::steady_clock::now();
  return {std::chrono::duration<double, std::milli>(t1 - t0).count(), thread_cpu_ms() - c0};
}

// The configurations timed: the reference, oneDNN direct, oneDNN Winograd.
struct Config {
  const char* name;
  ConvBackend backend;
  native::ConvWinograd winograd;
};
constexpr int kConfigs = 3;
const Config kConfigList[kConfigs] = {
    {"reference", ConvBackend::Reference, native::ConvWinograd::Off},
    {"onednn", ConvBackend::OneDNN, native::ConvWinograd::Off},
    {"onednn_winograd", ConvBackend::OneDNN, native::ConvWinograd::Force},
};

void use(const Config& c) {
  native::set_conv_backend(c.backend);
  native::set_conv_winograd(c.winograd);
}

constexpr int kPasses = 3;  // forward, backward-data, backward-weights
const char* kPassNames[kPasses] = {"fwd", "bwd_data", "bwd_weights"};

}  // namespace

int run_main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  ls::set_num_threads(opt.threads);
  ls::manual_seed(0);
  std::vector<double> speedups;  // reference / oneDNN, one per (layer, pass)
  std::string summary_layers, summary_winograd;  // winograd: direct / winograd
  for (const Layer& l : kLayers) {
    if (!opt.layer.empty() && opt.layer != l.name) continue;
    const ls::Tensor x = ls::randn({l.n, l.c_in, l.h, l.w});         // (N, C_in, H, W)
    const ls::Tensor w = ls::randn({l.c_out, l.c_in, l.k, l.k});     // (C_out, C_in, k, k)
    const ls::Tensor b = l.bias ? ls::randn({l.c_out}) : ls::Tensor();  // (C_out)
    const ls::IntList stride{l.stride}, pad{l.pad}, dil{1};
    const ls::Tensor y = native::conv2d_forward(x, w, b, stride, pad, dil, 1);
    const ls::Tensor gy = ls::randn(y.sizes());  // (N, C_out, oH, oW)
    auto run_pass = [&](int pass) {
      if (pass == 0) {
        native::conv2d_forward(x, w, b, stride, pad, dil, 1);
      } else if (pass == 1) {
        native::conv2d_backward(gy, x, w, stride, pad, dil, 1, true, false, false);
      } else {
        native::conv2d_backward(gy, x, w, stride, pad, dil, 1, false, true, l.bias);
      }
    };
    // times[backend][pass] over reps; one warm-up per (backend, pass) builds the primitives.
    std::vector<double> times[kConfigs][kPasses], cpu_times[kConfigs][kPasses];
    for (int bi = 0; bi < kConfigs; ++bi) {
      use(kConfigList[bi]);
      for (int pass = 0; pass < kPasses; ++pass) run_pass(pass);
    }
    for (int r = 0; r < opt.reps; ++r) {
      for (int pass = 0; pass < kPasses; ++pass) {
        for (int bi = 0; bi < kConfigs; ++bi) {
          use(kConfigList[bi]);
          const auto [wall, cpu] = time_ms([&] { run_pass(pass); });
          times[bi][pass].push_back(wall);
          cpu_times[bi][pass].push_back(cpu);
        }
      }
    }
    const native::ConvGeometry g = native::make_conv_geometry(x, w, b, stride, pad, dil, 1,
                                                              "bench_conv");
    const native::ConvPass passes[kPasses] = {native::ConvPass::Forward,
                                              native::ConvPass::BackwardData,
                                              native::ConvPass::BackwardWeights};
    double med[kConfigs][kPasses], cpu_med[kConfigs][kPasses];
    for (int bi = 0; bi < kConfigs; ++bi) {
      use(kConfigList[bi]);
      for (int pass = 0; pass < kPasses; ++pass) {
        med[bi][pass] = median(times[bi][pass]);
        cpu_med[bi][pass] = median(cpu_times[bi][pass]);
      }
      std::printf("{\"layer\":\"%s\",\"backend\":\"%s\",\"threads\":%d", l.name,
                  kConfigList[bi].name, opt.threads);
      for (int pass = 0; pass < kPasses; ++pass) {
        std::printf(",\"%s_ms\":%.3f,\"%s_cpu_ms\":%.3f", kPassNames[pass], med[bi][pass],
                    kPassNames[pass], cpu_med[bi][pass]);
      }
      if (kConfigList[bi].backend == ConvBackend::OneDNN) {
        for (int pass = 0; pass < kPasses; ++pass) {
          const bool bias = l.bias && pass != 1;
          std::printf(",\"%s_impl\":\"%s\"", kPassNames[pass],
                      native::conv_onednn_impl(g, passes[pass], bias).c_str());
        }
      }
      std::printf("}\n");
    }
    summary_layers += std::string(summary_layers.empty() ? "" : ",") + "\"" + l.name + "\":[";
    for (int pass = 0; pass < kPasses; ++pass) {
      const double s = opt.threads == 1 ? cpu_med[0][pass] / cpu_med[1][pass]
                                        : med[0][pass] / med[1][pass];
      speedups.push_back(s);
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.2f", pass ? "," : "", s);
      summary_layers += buf;
    }
    summary_layers += "]";
    summary_winograd +=
        std::string(summary_winograd.empty() ? "" : ",") + "\"" + l.name + "\":[";
    for (int pass = 0; pass < kPasses; ++pass) {
      const double s = opt.threads == 1 ? cpu_med[1][pass] / cpu_med[2][pass]
                                        : med[1][pass] / med[2][pass];
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.2f", pass ? "," : "", s);
      summary_winograd += buf;
    }
    summary_winograd += "]";
    std::fflush(stdout);
  }
  double log_sum = 0;
  for (double s : speedups) log_sum += std::log(s);
  const double geomean = speedups.empty() ? 0 : std::exp(log_sum / double(speedups.size()));
  std::printf("{\"summary\":\"onednn speedup over reference (fwd, bwd_data, bwd_weights)\","
              "\"clock\":\"%s\",\"threads\":%d,\"reps\":%d,\"geomean\":%.2f,"
              "\"layers\":{%s},\"winograd_speedup_over_onednn\":{%s}}\n",
              opt.threads == 1 ? "thread_cpu" : "wall", opt.threads, opt.reps, geomean,
              summary_layers.c_str(), summary_winograd.c_str());
  return 0;
}

int main(int argc, char** argv) {
  return lockstep::cli::run("bench_conv", [&] { return run_main(argc, argv); });
}
