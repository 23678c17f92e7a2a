// distributed/ddp_options.h — DDPOptions: the knobs of DistributedDataParallel,
// with fluent setters (libtorch style) and PyTorch's names and defaults.
// Read before: distributed/process_group.h. Read next: distributed/bucket_assignment.h.
#pragma once

namespace lockstep::distributed {

class DDPOptions {
 public:
  // Bucket size limit in MB (2^20 bytes); 0 means one bucket per parameter (the
  // paper's 0 MB baseline). Default 25, like PyTorch.
  DDPOptions& bucket_cap_mb(double v) { bucket_cap_mb_ = v; return *this; }
  // Limit of the first bucket (the last parameters), small so that the first
  // AllReduce starts early in backward. Default 1 MB.
  DDPOptions& first_bucket_mb(double v) { first_bucket_mb_ = v; return *this; }
  // Walk the autograd graph after forward to find parameters that will get no
  // gradient, and AllReduce a bitmap of used parameters. Default false.
  DDPOptions& find_unused_parameters(bool v) { find_unused_parameters_ = v; return *this; }
  // Broadcast buffers (BatchNorm running stats) from rank 0 before each synced forward.
  DDPOptions& broadcast_buffers(bool v) { broadcast_buffers_ = v; return *this; }
  // false: launch no AllReduce until backward has finished (the paper's
  // no-overlap baseline, for benchmarks). Default true.
  DDPOptions& overlap(bool v) { overlap_ = v; return *this; }

  double bucket_cap_mb() const { return bucket_cap_mb_; }
  double first_bucket_mb() const { return first_bucket_mb_; }
  bool find_unused_parameters() const { return find_unused_parameters_; }
  bool broadcast_buffers() const { return broadcast_buffers_; }
  bool overlap() const { return overlap_; }

 private:
  double bucket_cap_mb_ = 25.0;
  double first_bucket_mb_ = 1.0;
  bool find_unused_parameters_ = false;
  bool broadcast_buffers_ = true;
  bool overlap_ = true;
};

}  // namespace lockstep::distributed
