// distributed/process_group/cuda/host_staging.h — one CUDA tensor's trip through pinned host
// memory, for the CPU backends (Gloo, MPI) when they are handed CUDA tensors; they reach it
// through HostStagingHooks::stage (distributed/process_group/host_staging_set.h), which
// host_staging.cpp registers. Part of lockstep's CUDA library (Note [CUDA build]).
//
// § Note [Gloo with CUDA tensors]
// Gloo moves host memory over TCP. Given a CUDA tensor, ProcessGroupGloo
// stages it (../process_group_gloo_collectives.cpp):
//   - on the calling thread, HostStaging allocates a pinned host twin, queues
//     the device-to-host copy on the current compute stream (async: the host
//     does not wait for backward's kernels) and records an event there;
//   - the Gloo worker thread waits for that event (before()), runs the
//     collective on the twin, then copies the result back to the device on a
//     per-device staging stream that first waits on the same event, and waits
//     for the copy (after()) before completing the Work.
// So Work::wait() returning means the device tensor holds the result, and the
// compute stream needs no extra ordering: its later kernels are queued after
// the host has seen the copy finish. The device tensor is record_stream'ed on
// the staging stream for the caching allocator. Costs: two PCIe copies and a
// pinned allocation per collective — Gloo with CUDA tensors is for
// correctness and for machines without NCCL, not for speed.
// Read before: distributed/process_group/process_group_gloo.h, core/cuda/cuda_allocator.h.
// Read next: distributed/process_group/cuda/process_group_nccl.h.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "core/tensor.h"
#include "distributed/process_group/host_staging_set.h"

namespace lockstep::distributed::detail {

class HostStaging final : public StagedTensor {
 public:
  // `device_tensor`: a contiguous CUDA tensor. copy_in: the collective reads
  // it (queue the copy to the host now); copy_out: it writes it.
  HostStaging(const Tensor& device_tensor, bool copy_in, bool copy_out, const char* collective);
  ~HostStaging() override;  // frees the pinned twin once the copy into it has finished
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  const Tensor& host() const override { return host_; }
  const Tensor& device() const override { return device_; }
  bool copies_out() const override { return copy_out_; }
  void before() const override;
  void after(const Tensor& part) const override;

 private:
  Tensor device_;
  Tensor host_;
  void* pinned_ = nullptr;
  cudaEvent_t ready_ = nullptr;  // on the compute stream, after the copy in (or at the call)
  bool copy_in_;
  bool copy_out_;
};

}  // namespace lockstep::distributed::detail
