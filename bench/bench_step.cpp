// bench/bench_step.cpp — milliseconds of one training step (forward, backward, SGD), ResNet or
// BERT.
//
//   build/bin/bench_step --model resnet50|resnet18|bert|bert-tiny [--batch 8] [--image 224]
//                        [--seq 128] [--iters 3] [--warmup 1] [--threads 1] [--layers L]
//                        [--profile 0|1] [--device cpu|cuda]
//
// The step mirrors bench/torch/step.py with bench/torch/models.py, so the
// two can be compared number for number (bench/compare_step.sh). The model, its input,
// labels, loss and FLOP count come from bench/bench_models.h (shared with bench_ddp);
// SGD lr 0.01 momentum 0.9.
// Timing, like the reference: fwd = forward + loss; bwd = zero_grad + backward;
// opt = optimizer step; step = all three. Warm-up steps are printed (warmup: true)
// but left out of the medians.
// --layers sets BERT's encoder depth; bert-tiny has no PyTorch counterpart (bench_models.h).
//
// Output: one JSON line per step, then a summary line: medians of step/fwd/bwd/opt ms,
// cpu_ms (process CPU time of the step, all threads: with 1 thread on a busy machine,
// cpu_ms < step_ms shows how much of the step the scheduler gave to other processes),
// params, train_gflop (per step), gflops (train_gflop / median step), peak_rss_mb
// (getrusage ru_maxrss of this process: the high-water mark of resident memory),
// alloc_peak_mb (the tensor allocator's high-water mark over the steps, core/allocator.h:
// peak_rss_mb minus this is code, libraries and heap slack). Each step line also has
// alloc_fwd_mb (tensor bytes alive right after forward + loss: the saved activations) and
// cached_fwd_mb (free large blocks the allocator holds at that moment, Note [CPU block cache])
// and page_faults (minor page faults during the step: memory the OS had to map and zero; from
// the second step on, Note [CPU block cache] keeps it near 0 for a repeating workload).
//
// FLOP count (train_gflop): 3 x Workload::forward_flops (see bench/bench_models.h).
//
// --device cuda (a CUDA build with a GPU) moves the model, input and labels to
// cuda:0 (Module::to) and runs the same step there. GPU kernels are asynchronous, so
// the device is synchronised (ls::cuda::synchronize) before t0 and after forward,
// backward and the step: each region's time is the GPU's, not the time to queue it.
// The summary then also has device "cuda", cuda_peak_mb (the caching allocator's peak
// of allocated bytes over the timed steps, core/cuda/cuda_allocator.h) and
// cuda_reserved_mb (memory obtained from cudaMalloc); alloc_* stay the CPU
// allocator's. bench/torch_step_cuda.py prints the same fields for PyTorch.
//
// --profile 1 profiles the timed steps (not the warm-up) with ls::profiler and prints
// its table to stderr at the end (core/profiler.h), then the bytes moved per step by ops
// without a GEMM (Note [Profiler bytes]) as one JSON line. LOCKSTEP_PROFILE=1 also works but
// includes the warm-up step, whose first calls create oneDNN primitives.
//
// Read before: bench/bench_models.h, optim/sgd.h, core/profiler.h.
// Read next: bench/compare_step.sh, docs/results/cpu_step.md.
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_device.h"
#include "bench/bench_models.h"
#include "bench/bench_stats.h"
#include "core/allocator.h"
#include "core/autocast.h"
#include "core/parallel.h"
#include "core/profiler.h"
#include "optim/sgd.h"
#include "tools/cli.h"
#if LOCKSTEP_WITH_CUDA
#include "core/cuda/cuda_allocator.h"
#include "core/cuda/cuda_context.h"
#endif

namespace {

namespace ls = lockstep;

struct Options {
  ls::bench::ModelOptions model;
  int iters = 3, warmup = 1, threads = 1;
  bool profile = false;
  std::string amp = "off";     // --amp bf16: forward + loss under ls::AutocastGuard
  std::string device = "cpu";  // cpu | cuda
};

Options parse(int argc, char** argv) {
  Options o;
  ls::cli::Program p("bench_step", "Times training steps of ResNet or BERT (forward, backward, SGD step); JSON "
                                   "lines, the last one a summary.");
  ls::bench::add_model_options(p, o.model);
  ls::bench::add_timing_options(p, o.iters, o.warmup, o.threads);
  p.switch01("--profile", o.profile, "print the per-op time table of the timed steps on stderr");
  p.choice("--device", o.device, "where the model runs", {"cpu", "cuda"});
  p.choice("--amp", o.amp, "mixed precision: bf16 runs forward + loss under ls::AutocastGuard", {"off", "bf16"});
  p.parse(argc, argv);
  ls::bench::check_model_options(p, o.model);
  if (o.device == "cuda" && !ls::cuda::is_available()) {
    p.usage_error("--device cuda: no CUDA device (this build has no CUDA backend, or no GPU is visible)");
  }
  return o;
}

double ms_between(std::chrono::steady_clock::time_point a,
                  std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

using lockstep::bench::median;  // bench/bench_stats.h

// CPU time of this process (all its threads), for telling a slow step from a busy machine.
double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// Minor page faults of this process so far (getrusage ru_minflt).
long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

double mb(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

using ls::bench::device_sync;  // bench/bench_device.h

// The caching allocator's (peak allocated, reserved) MB on a CUDA device; zeros on the CPU.
std::pair<double, double> cuda_memory_mb(const ls::Device& device) {
#if LOCKSTEP_WITH_CUDA
  if (device.is_cuda()) {
    const ls::cuda::MemoryStats s = ls::cuda::memory_stats(device.index);
    return {static_cast<double>(s.peak_allocated_bytes) / (1024.0 * 1024.0),
            static_cast<double>(s.reserved_bytes) / (1024.0 * 1024.0)};
  }
#endif
  (void)device;
  return {0.0, 0.0};
}

void reset_cuda_peak(const ls::Device& device) {
#if LOCKSTEP_WITH_CUDA
  if (device.is_cuda()) ls::cuda::reset_peak_memory_stats(device.index);
#endif
  (void)device;
}

double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux: kilobytes
}

}  // namespace

namespace {

int run(int argc, char** argv) {
  Options o = parse(argc, argv);
  ls::set_num_threads(o.threads);
  ls::bench::Workload wl = ls::bench::make_workload(o.model);
  const ls::Device device = o.device == "cuda" ? ls::Device::cuda(0) : ls::Device::cpu();
  if (device.is_cuda()) {  // built on the CPU (same seed as the reference), then moved
    wl.module->to(device);
    wl.input = wl.input.to(device);
    wl.labels = wl.labels.to(device);
  }
  const int64_t params = wl.num_parameters();
  ls::optim::SGD sgd(wl.module->parameters(), ls::optim::SGDOptions(0.01).momentum(0.9));

  using clock = std::chrono::steady_clock;
  std::vector<double> step_ms, fwd_ms, bwd_ms, opt_ms, cpu_ms;
  double alloc_peak_mb = 0;  // the allocator's high-water mark over all steps
  for (int i = 0; i < o.warmup + o.iters; ++i) {
    if (o.profile && i == o.warmup) {
      ls::profiler::reset();
      ls::profiler::enable();
    }
    if (i == o.warmup) reset_cuda_peak(device);  // cuda_peak_mb covers the timed steps
    ls::cpu_allocator().reset_peak();
    device_sync(device);
    const double cpu0 = process_cpu_ms();
    const long faults0 = minor_faults();
    const auto t0 = clock::now();
    ls::Tensor loss;
    {
      ls::AutocastGuard amp(ls::kBFloat16, o.amp == "bf16");  // Note [Autocast policy]
      loss = wl.loss();  // forward + loss
    }
    device_sync(device);
    const auto t1 = clock::now();
    const ls::AllocatorStats fwd_stats = ls::cpu_allocator().stats();
    const double after_fwd = mb(fwd_stats.current_bytes), cached_fwd = mb(fwd_stats.cached_bytes);
    sgd.zero_grad();
    loss.backward();
    device_sync(device);
    const auto t2 = clock::now();
    sgd.step();
    device_sync(device);
    const auto t3 = clock::now();
    const double c = process_cpu_ms() - cpu0;
    const long faults = minor_faults() - faults0;
    const double alloc_peak = mb(ls::cpu_allocator().stats().peak_bytes);
    alloc_peak_mb = std::max(alloc_peak_mb, alloc_peak);
    const bool warm = i < o.warmup;
    const float loss_value = loss.to(ls::Device::cpu()).item<float>();  // after the clocks
    const double s = ms_between(t0, t3), f = ms_between(t0, t1), b = ms_between(t1, t2),
                 u = ms_between(t2, t3);
    std::printf(
        "{\"bench\":\"step\",\"model\":\"%s\",\"iter\":%d,\"warmup\":%s,\"step_ms\":%.2f,"
        "\"fwd_ms\":%.2f,\"bwd_ms\":%.2f,\"opt_ms\":%.2f,\"cpu_ms\":%.2f,\"loss\":%.5f,"
        "\"alloc_fwd_mb\":%.1f,\"cached_fwd_mb\":%.1f,\"alloc_peak_mb\":%.1f,\"page_faults\":%ld}\n",
        o.model.model.c_str(), i, warm ? "true" : "false", s, f, b, u, c, loss_value,
        after_fwd, cached_fwd, alloc_peak, faults);
    std::fflush(stdout);
    if (warm) continue;
    step_ms.push_back(s);
    fwd_ms.push_back(f);
    bwd_ms.push_back(b);
    opt_ms.push_back(u);
    cpu_ms.push_back(c);
  }
  if (o.profile) ls::profiler::disable();
  const double train_gflop = 3.0 * wl.forward_flops * 1e-9;
  const double step = median(step_ms);
  const auto cuda_mb = cuda_memory_mb(device);
  std::printf(
      "{\"bench\":\"step\",\"summary\":true,\"model\":\"%s\",\"batch\":%lld,"
      "%s,\"threads\":%d,\"iters\":%d,\"params\":%lld,"
      "\"step_ms\":%.2f,\"fwd_ms\":%.2f,\"bwd_ms\":%.2f,\"opt_ms\":%.2f,\"cpu_ms\":%.2f,"
      "\"train_gflop\":%.3f,\"gflops\":%.2f,\"peak_rss_mb\":%.1f,\"alloc_peak_mb\":%.1f,"
      "\"device\":\"%s\",\"amp\":\"%s\",\"cuda_peak_mb\":%.1f,\"cuda_reserved_mb\":%.1f}\n",
      o.model.model.c_str(), static_cast<long long>(o.model.batch), wl.shape_json.c_str(), o.threads, o.iters,
      static_cast<long long>(params), step, median(fwd_ms), median(bwd_ms), median(opt_ms),
      median(cpu_ms), train_gflop, train_gflop / (step * 1e-3), peak_rss_mb(), alloc_peak_mb,
      o.device.c_str(), o.amp.c_str(), cuda_mb.first, cuda_mb.second);
  std::fflush(stdout);  // before a profiler table goes to stderr
  if (o.profile) {
    std::fputs(ls::profiler::report().c_str(), stderr);
    // The memory-bound traffic per step (Note [Profiler bytes] in core/profiler.h).
    const std::vector<ls::profiler::Entry> rows = ls::profiler::entries();
    double all_mb = 0.0;
    for (const ls::profiler::Entry& e : rows) all_mb += e.self_mb;
    const double non_gemm = ls::profiler::non_gemm_mb(rows);
    std::fprintf(stderr,
                 "{\"bench\":\"step_bytes\",\"model\":\"%s\",\"amp\":\"%s\",\"iters\":%d,"
                 "\"non_gemm_mb_per_step\":%.1f,\"gemm_op_mb_per_step\":%.1f}\n",
                 o.model.model.c_str(), o.amp.c_str(), o.iters, non_gemm / o.iters,
                 (all_mb - non_gemm) / o.iters);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ls::cli::run("bench_step", [&] { return run(argc, argv); });
}
