// distributed/process_group/host_staging_set.cpp — HostStagingSet: CUDA operands staged
// through the CUDA library's hook, CPU operands as they are.
// Read before: distributed/process_group/host_staging_set.h.
#include "distributed/process_group/host_staging_set.h"

namespace lockstep::distributed::detail {

Tensor HostStagingSet::host(const Tensor& t, bool copy_in, bool copy_out, const char* collective) {
  if (!t.defined() || !t.device().is_cuda()) return t;
  const auto& hooks = lockstep::detail::cuda_hooks<HostStagingHooks>(collective);
  items_.push_back(hooks.stage(t, copy_in, copy_out, collective));
  return items_.back()->host();
}

void HostStagingSet::before() const {
  for (const auto& s : items_) s->before();
}

void HostStagingSet::after(const Tensor* part) const {
  for (const auto& s : items_) {
    if (s->copies_out()) s->after(part != nullptr ? *part : s->host());
  }
}

void HostStagingSet::report_devices(std::vector<Tensor>& result) const {
  for (Tensor& t : result) {
    for (const auto& s : items_) {
      if (t.is_same(s->host())) t = s->device();
    }
  }
}

}  // namespace lockstep::distributed::detail
