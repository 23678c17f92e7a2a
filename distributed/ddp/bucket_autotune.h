// distributed/ddp/bucket_autotune.h — choosing bucket_cap_mb and first_bucket_mb
// from measurements of the actual process group (DDPOptions().autotune_buckets).
//
// § Note [Bucket autotuning]
// A bucket's AllReduce costs about  t(S) = latency + S / bandwidth  for S
// bytes. Small buckets start communication early in backward and overlap it
// with compute, but pay the latency once each; large ones amortise it but
// start late (paper Section 3.2.2, Figures 7-8: the best size depends on the
// model AND the network). With autotune_buckets(true), DistributedDataParallel's
// constructor times an AllReduce of float32 buffers at up to five sizes, from
// min(gradient size, 64 MB) down by factors of 4 (64, 16, 4, 1, 0.25 MB for a
// large model; at least two sizes, none under 4 KB unless the model is
// smaller), each warmed up once and timed `reps` times (the fastest: on a
// shared machine delays only add), takes the MAX of each time over ranks (one AllReduce of the times, so every rank fits
// the same numbers and picks the same sizes), and fits latency and bandwidth
// by least squares on the relative error (weights 1/t^2, so that the largest
// size, whose time grows superlinearly once buffers leave the caches, does not
// dominate the fit). The rule, from the fitted line:
//   bucket_cap_mb   the smallest S whose latency share latency / t(S) is at
//                   most 10%:  S = 9 * latency * bandwidth;
//   first_bucket_mb the smallest S whose latency share is at most 50%:
//                   S = latency * bandwidth (the first bucket should start
//                   early: backward has just begun and has much left to hide);
// both clamped to [4 KB, 64 MB] and to the gradient size, and the first
// bucket to at most bucket_cap_mb. Rank 0 prints the choice to stderr in one
// line; DistributedDataParallel::bucket_choice() returns it on every rank.
// The measurement takes about (warm-up + reps) x sizes AllReduces: well under
// a second on loopback for models up to ~100 MB of gradients.
// Read before: distributed/ddp/ddp_options.h, distributed/process_group/process_group.h.
// Read next: distributed/ddp/distributed_data_parallel.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "distributed/process_group/process_group.h"

namespace lockstep::distributed {

struct BucketChoice {
  double bucket_cap_mb = 0.0;
  double first_bucket_mb = 0.0;
  double latency_us = 0.0;       // fitted per-AllReduce latency
  double bandwidth_gbps = 0.0;   // fitted bus rate, GB/s (1e9 bytes)
  std::vector<double> sizes_bytes;  // what was measured
  std::vector<double> seconds;      // max over ranks of the fastest time, per size
  // "DDP bucket autotune: ... -> bucket_cap_mb=... first_bucket_mb=..."
  std::string describe() const;
};

// The pure rule of Note [Bucket autotuning] on measurements (sizes in bytes,
// times in seconds; at least two distinct sizes) for a model with
// `gradient_bytes` bytes of gradients.
BucketChoice choose_bucket_sizes(const std::vector<double>& sizes_bytes, const std::vector<double>& seconds,
                                 double gradient_bytes);

// The sizes the measurement uses for `gradient_bytes` (Note [Bucket autotuning]).
std::vector<int64_t> autotune_sizes(int64_t gradient_bytes);

// Collective: measures AllReduce on `process_group` (every rank must call it
// with the same gradient_bytes) and applies choose_bucket_sizes. The buffers
// live on `device`, the gradients' device, so an NCCL group times the GPU
// collective (each timed call ends with the device synchronised).
BucketChoice autotune_buckets(ProcessGroup& process_group, int64_t gradient_bytes, int reps = 3,
                              Device device = Device::cpu());

}  // namespace lockstep::distributed
