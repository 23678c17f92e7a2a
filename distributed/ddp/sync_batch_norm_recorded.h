// distributed/ddp/sync_batch_norm_recorded.h — SyncBatchNormBackward's formula as
// recording ops, for a backward with create_graph (Note [Double backward] in
// autograd/double_backward.h), and the group sum it needs.
//
// § Note [SyncBatchNorm double backward]
// The group's statistics depend on every rank's input, so the recorded formula
// sums over the group with a differentiable op: group_sum(t), an AllReduce (SUM)
// whose node's formula is group_sum of the incoming gradient (every rank's
// output is the same sum, so dL/dt_r = the sum over ranks s of dL/dy_s),
// itself recorded again. As with the first-order node the gradients are those
// of the sum of every rank's loss: each rank runs the second backward too, on
// the same graph, so the AllReduces are issued in the same order everywhere
// (Note [SyncBatchNorm collectives inside DDP] in sync_batch_norm.h). With sums
// over N and the spatial dims of this rank's batch, n the group's count, and
// the statistics in float64 as in the forward:
//   mean = group_sum(sum x) / n,   var = group_sum(sum x^2) / n - mean^2
//   xhat = (x - mean) invstd,      gw = g w
//   dx = invstd (gw - group_sum(sum gw) / n - xhat group_sum(sum gw xhat) / n)
//   dw = sum g xhat,  db = sum g   (this rank's own, as the first-order node's)
// Two AllReduces per formula, always issued, like the first-order node's one.
// Tests: tests/distributed/test_sync_batch_norm_double_backward.cpp.
//
// Read before: distributed/ddp/sync_batch_norm.h, autograd/functions/norm_recorded.h.
// Read next: tests/distributed/test_sync_batch_norm_double_backward.cpp.
#pragma once

#include <memory>

#include "autograd/node.h"
#include "distributed/process_group/process_group.h"

namespace lockstep::distributed {

// AllReduce (SUM) `t` on `group` in place and wait; errors name the op and the rank.
void allreduce_sum(Tensor& t, ProcessGroup& group, const char* what);

// The sum of t over the group, as a new tensor, recorded (GroupSumBackward) when t
// requires grad and grad mode is on.
Tensor group_sum(const Tensor& t, const std::shared_ptr<ProcessGroup>& group);

// dx, dw, db of sync_batch_norm (training) for the incoming g, with recording ops:
// x (N, C, *) this rank's input, weight (C) or undefined, count n over the group.
autograd::variable_list sync_batch_norm_backward_recorded(const Tensor& g, const Tensor& x,
                                                          const Tensor& weight, double count,
                                                          double eps,
                                                          const std::shared_ptr<ProcessGroup>& group,
                                                          bool need_input, bool need_weight,
                                                          bool need_bias);

}  // namespace lockstep::distributed
