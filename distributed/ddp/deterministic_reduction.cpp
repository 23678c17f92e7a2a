// distributed/ddp/deterministic_reduction.cpp — AllGather, then add the
// ranks' buffers in rank order (Note [Deterministic reduction]).
// Read before: distributed/ddp/deterministic_reduction.h.
#include "distributed/ddp/deterministic_reduction.h"

#include <vector>

#include "core/grad_mode.h"
#include "core/native/native.h"

namespace lockstep::distributed {

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

}  // namespace lockstep::distributed
