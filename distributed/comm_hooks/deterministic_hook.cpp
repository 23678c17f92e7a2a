// distributed/comm_hooks/deterministic_hook.cpp — AllGather, then add the
// ranks' buffers in rank order (Note [Deterministic reduction]).
// Read before: distributed/comm_hooks/deterministic_hook.h.
#include "distributed/comm_hooks/deterministic_hook.h"

#include <vector>

#include "core/grad_mode.h"
#include "core/native/native.h"

namespace lockstep::distributed::comm_hooks {

TensorFuture rank_ordered_sum(ProcessGroup& process_group, Tensor flat) {
  LS_CHECK(flat.dim() == 1 && flat.is_contiguous(), "deterministic reduction (rank ", process_group.rank(),
           "): expects a contiguous 1-D buffer, got shape ", flat.shape_str(),
           "; pass the bucket's flat buffer");
  if (process_group.size() == 1) return TensorFuture::ready(flat);
  std::vector<Tensor> gathered;  // (world) x (numel), filled when the work completes
  auto work = process_group.allgather(gathered, flat);
  return TensorFuture::from_work(std::move(work), flat).then([gathered](const Tensor& out) {
    NoGradGuard no_grad;
    Tensor result = out;  // (numel): our own contribution is gathered[rank] too
    native::copy_(result, gathered[0]);
    for (size_t r = 1; r < gathered.size(); ++r) native::binary_(native::BinaryOp::Add, result, gathered[r]);  // rank order
    return result;
  });
}

TensorFuture deterministic_allreduce_hook(ProcessGroup& process_group, GradBucket& bucket) {
  Tensor buffer = bucket.buffer();  // (numel)
  native::binary_scalar_(native::BinaryOp::Mul, buffer, 1.0 / bucket.divisor());
  return rank_ordered_sum(process_group, buffer);
}

}  // namespace lockstep::distributed::comm_hooks
