// distributed/ddp/coalesced_broadcast.cpp — Note [Coalesced buffer broadcast].
// Read before: distributed/ddp/coalesced_broadcast.h.
#include "distributed/ddp/coalesced_broadcast.h"

#include "core/factory.h"
#include "core/grad_mode.h"
#include "core/native/native.h"
#include "distributed/ddp/bucket_assignment.h"

namespace lockstep::distributed::detail {

CoalescedBroadcast::CoalescedBroadcast(ProcessGroup& pg, const std::vector<Tensor>& tensors, int source,
                                       double cap_mb)
    : tensors_(tensors), receives_(pg.rank() != source) {
  NoGradGuard no_grad;
  std::vector<size_t> in_order(tensors_.size());
  for (size_t i = 0; i < in_order.size(); ++i) in_order[i] = i;
  // One flat tensor per (device, dtype), up to cap_mb each.
  for (BucketSpec& spec : compute_bucket_assignment(tensors_, in_order, cap_mb, cap_mb)) {
    int64_t numel = 0;
    for (size_t i : spec.param_indices) numel += tensors_[i].numel();
    Group g{std::move(spec.param_indices), empty({numel}, TensorOptions().dtype(spec.dtype).device(spec.device))};
    if (!receives_) {
      int64_t at = 0;
      for (size_t i : g.members) {
        const Tensor& t = tensors_[i];
        native::copy_(g.flat.narrow(0, at, t.numel()).view(t.sizes()), t);
        at += t.numel();
      }
    }
    groups_.push_back(std::move(g));
  }
  for (Group& g : groups_) works_.push_back(pg.broadcast(g.flat, source));
}

void CoalescedBroadcast::finish() {
  if (!receives_) return;
  NoGradGuard no_grad;
  for (const Group& g : groups_) {
    int64_t at = 0;
    for (size_t i : g.members) {
      Tensor& t = tensors_[i];
      native::copy_(t, g.flat.narrow(0, at, t.numel()).view(t.sizes()));
      at += t.numel();
    }
  }
}

void broadcast_coalesced(ProcessGroup& pg, const std::vector<Tensor>& tensors, int source,
                         std::chrono::milliseconds timeout) {
  CoalescedBroadcast broadcast(pg, tensors, source);
  for (const auto& w : broadcast.works()) w->wait(timeout);
  broadcast.finish();
}

void broadcast_each(ProcessGroup& pg, const std::vector<Tensor>& tensors, int source,
                    std::chrono::milliseconds timeout) {
  NoGradGuard no_grad;
  std::vector<std::shared_ptr<Work>> works;
  std::vector<Tensor> targets;  // a strided tensor travels as a contiguous copy
  for (const Tensor& t : tensors) {
    targets.push_back(t.is_contiguous() ? t : t.contiguous());
    works.push_back(pg.broadcast(targets.back(), source));
  }
  for (const auto& w : works) w->wait(timeout);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].is_contiguous()) native::copy_(tensors[i], targets[i]);
  }
}

}  // namespace lockstep::distributed::detail
