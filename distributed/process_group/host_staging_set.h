// distributed/process_group/host_staging_set.h — the staged operands of one Gloo or MPI
// collective handed CUDA tensors: each goes through a pinned host twin made by lockstep's
// CUDA library, reached through HostStagingHooks, which it registers as it loads (Note [CUDA
// hooks] in core/cuda_hooks.h; Note [Gloo with CUDA tensors] in
// distributed/process_group/cuda/host_staging.h); CPU tensors pass as they are.
// Read before: core/cuda_hooks.h.
// Read next: distributed/process_group/process_group_gloo_collectives.cpp.
#pragma once

#include <memory>
#include <vector>

#include "core/cuda_hooks.h"
#include "core/tensor.h"

namespace lockstep::distributed::detail {

// One CUDA tensor's trip through pinned host memory (HostStaging in
// distributed/process_group/cuda/host_staging.h implements it).
class StagedTensor {
 public:
  virtual ~StagedTensor() = default;
  virtual const Tensor& host() const = 0;    // CPU, same shape and dtype, pinned
  virtual const Tensor& device() const = 0;  // the CUDA tensor
  virtual bool copies_out() const = 0;
  // On the worker thread, before the collective reads host(): waits for the copy in.
  virtual void before() const = 0;
  // On the worker thread, after the collective: copies `part` (host() or a view of it)
  // to the same bytes of device() and waits for the copy.
  virtual void after(const Tensor& part) const = 0;
};

struct HostStagingHooks {
  // `device_tensor`: a contiguous CUDA tensor; copy_in: the collective reads it (the copy
  // to the host is queued now); copy_out: the collective writes it.
  std::shared_ptr<StagedTensor> (*stage)(const Tensor& device_tensor, bool copy_in, bool copy_out,
                                         const char* collective) = nullptr;
};

// What a CPU backend's public call builds (host()) and its queued body brackets itself
// with (before(), after(), report_devices()). Copyable: copies share the twins.
class HostStagingSet {
 public:
  // The tensor the backend moves: `t` itself when on the CPU, else a new pinned twin.
  Tensor host(const Tensor& t, bool copy_in, bool copy_out, const char* collective);
  bool empty() const { return items_.empty(); }
  // Worker thread: every copy in has landed.
  void before() const;
  // Worker thread: copies every written twin back; only `part` (a view of the
  // one staged tensor) when given — a piece of a chunked allreduce.
  void after(const Tensor* part = nullptr) const;
  // Replaces host twins in a body's result with their device tensors.
  void report_devices(std::vector<Tensor>& result) const;

 private:
  std::vector<std::shared_ptr<StagedTensor>> items_;
};

}  // namespace lockstep::distributed::detail
