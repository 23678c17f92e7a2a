// distributed/ddp/bucket_autotune.cpp — measure AllReduce, fit, choose
// (Note [Bucket autotuning]).
// Read before: distributed/ddp/bucket_autotune.h.
#include "distributed/ddp/bucket_autotune.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/cuda_hooks.h"
#include "core/factory.h"
#include "core/native/native.h"

namespace lockstep::distributed {

namespace {

constexpr double kMB = 1024.0 * 1024.0;
constexpr double kMinBytes = 4096.0;
constexpr double kMaxBytes = 64.0 * kMB;

}  // namespace

std::string BucketChoice::describe() const {
  std::string points;
  for (size_t i = 0; i < sizes_bytes.size(); ++i) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%.3gMB:%.3gms", i ? " " : "", sizes_bytes[i] / kMB, seconds[i] * 1e3);
    points += buf;
  }
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "] -> latency %.1f us, bandwidth %.2f GB/s -> bucket_cap_mb=%.3f first_bucket_mb=%.3f",
                latency_us, bandwidth_gbps, bucket_cap_mb, first_bucket_mb);
  return "DDP bucket autotune: AllReduce [" + points + buf;
}

BucketChoice choose_bucket_sizes(const std::vector<double>& sizes_bytes, const std::vector<double>& seconds,
                                 double gradient_bytes) {
  LS_CHECK(sizes_bytes.size() == seconds.size() && sizes_bytes.size() >= 2, "bucket autotune: needs at least two "
           "(size, time) measurements, got ", sizes_bytes.size(), " sizes and ", seconds.size(), " times");
  LS_CHECK(gradient_bytes > 0, "bucket autotune: the model has no gradient bytes");
  // Least squares t = a + b * S on the RELATIVE error (weights 1 / t^2): each
  // size counts alike. Plain least squares lets the largest size dominate, and
  // its memory effects (superlinear time) then push the intercept below zero.
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < sizes_bytes.size(); ++i) {
    LS_CHECK(seconds[i] > 0, "bucket autotune: measured time ", seconds[i], " s for ", sizes_bytes[i],
             " bytes; times must be positive");
    const double w = 1.0 / (seconds[i] * seconds[i]);
    sw += w;
    sx += w * sizes_bytes[i];
    sy += w * seconds[i];
    sxx += w * sizes_bytes[i] * sizes_bytes[i];
    sxy += w * sizes_bytes[i] * seconds[i];
  }
  const double denom = sw * sxx - sx * sx;
  LS_CHECK(denom > 0, "bucket autotune: the measured sizes are all equal; need two distinct sizes");
  double b = (sw * sxy - sx * sy) / denom;  // seconds per byte
  double a = (sy * sxx - sx * sxy) / denom;  // seconds
  // Noise can make either coefficient non-positive: a flat line means the
  // bandwidth is the best rate seen; a negative intercept means latency is
  // below what the measurement resolves, taken as 1 us.
  if (b <= 0) {
    double best = 0;
    for (size_t i = 0; i < sizes_bytes.size(); ++i) best = std::max(best, sizes_bytes[i] / seconds[i]);
    b = 1.0 / best;
  }
  a = std::max(a, 1e-6);
  const double bandwidth = 1.0 / b;  // bytes per second
  const double upper = std::max(kMinBytes, std::min(kMaxBytes, gradient_bytes));
  const double cap = std::clamp(9.0 * a * bandwidth, kMinBytes, upper);
  const double first = std::clamp(a * bandwidth, kMinBytes, cap);
  BucketChoice c;
  c.bucket_cap_mb = cap / kMB;
  c.first_bucket_mb = first / kMB;
  c.latency_us = a * 1e6;
  c.bandwidth_gbps = bandwidth * 1e-9;
  c.sizes_bytes = sizes_bytes;
  c.seconds = seconds;
  return c;
}

std::vector<int64_t> autotune_sizes(int64_t gradient_bytes) {
  std::vector<int64_t> sizes;
  double s = std::min(static_cast<double>(gradient_bytes), kMaxBytes);
  for (int k = 0; k < 5 && s >= 4; ++k, s /= 4) {
    if (s < kMinBytes && sizes.size() >= 2) break;
    sizes.push_back(static_cast<int64_t>(s) / 4 * 4);  // whole float32 elements
  }
  return sizes;
}

namespace {
// One AllReduce, finished as far as the host can tell: Work::wait() blocks the
// host for Gloo and MPI, while on a GPU it only orders the compute stream
// (Note [NCCL stream isolation]), so the device is synchronised too.
void allreduce_and_wait(ProcessGroup& process_group, Tensor& buffer) {
  process_group.allreduce(buffer)->wait(process_group.timeout());
  if (buffer.device().is_cuda()) {
    lockstep::detail::cuda_hooks<CudaRuntimeHooks>("autotune_buckets").synchronize(buffer.device().index);
  }
}
}  // namespace

BucketChoice autotune_buckets(ProcessGroup& process_group, int64_t gradient_bytes, int reps, Device device) {
  LS_CHECK(reps >= 1, "bucket autotune: reps must be >= 1, got ", reps);
  const std::vector<int64_t> sizes = autotune_sizes(gradient_bytes);
  LS_CHECK(sizes.size() >= 2, "DDP (rank ", process_group.rank(), "): autotune_buckets: the model's gradients ("
           , gradient_bytes, " bytes) are too small to measure AllReduce at two sizes; set bucket_cap_mb instead");
  std::vector<double> local;  // fastest seconds per size on this rank
  for (int64_t bytes : sizes) {
    Tensor buffer = native::zeros({bytes / 4}, kFloat32, device);  // (bytes / 4)
    allreduce_and_wait(process_group, buffer);  // warm-up: connections, pages
    std::vector<double> times;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      allreduce_and_wait(process_group, buffer);
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    local.push_back(*std::min_element(times.begin(), times.end()));  // delays only add: the fastest rep
  }
  // The slowest rank's time per size, the same on every rank.
  Tensor all = tensor(local);  // (sizes) float64
  process_group.allreduce(all, ReduceOp::MAX)->wait(process_group.timeout());
  std::vector<double> sizes_bytes(sizes.begin(), sizes.end());
  return choose_bucket_sizes(sizes_bytes, all.to_vector<double>(), static_cast<double>(gradient_bytes));
}

}  // namespace lockstep::distributed
