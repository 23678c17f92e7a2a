// distributed/ddp/sync_batch_norm.h — SyncBatchNorm: BatchNorm2d whose training
// statistics are those of the whole process group's batch.
//
//   auto pg = ls::distributed::init_process_group("gloo");
//   auto net = ls::distributed::convert_sync_batchnorm(ls::models::resnet50(), pg);
//   ls::distributed::DistributedDataParallel ddp(net, pg);   // as usual
//
// or build layers directly: std::make_shared<SyncBatchNorm>(64, pg).
//
// With plain BatchNorm2d under DDP each rank normalises with its own batch's
// mean and variance, so N ranks of batch B are not the same model as one
// process of batch N·B. SyncBatchNorm makes them the same (PyTorch's
// torch.nn.SyncBatchNorm): in training mode,
//   forward:  one AllReduce (SUM, float64) of [sum x (C), sum x^2 (C), count]
//             over the group; mean = sum / n, var = sum x^2 / n - mean^2 (biased),
//             y = (x - mean) / sqrt(var + eps) * w + b; running statistics move
//             toward (mean, var * n / (n - 1)) on every rank alike.
//   backward: one AllReduce (SUM, float64) of [sum dy (C), sum dy * xhat (C)],
//             then dx = w * invstd * (dy - sum dy / n - xhat * sum dy*xhat / n).
// n is the group's total count, so ranks may hold different batch sizes. The
// sums are accumulated in float64: E[x^2] - mean^2 then loses about
// 1e-16 * mean^2 / var, far below float32 rounding for any activation.
// weight / bias get this rank's own gradient (sum over the local batch), as in
// PyTorch: DDP then averages it like any other gradient. Eval mode is plain
// BatchNorm2d with the running statistics. Parameters and buffers are
// BatchNorm2d's (same names and order), so state dicts interchange.
//
// § Note [SyncBatchNorm collectives inside DDP]
// SyncBatchNorm issues its AllReduces on the same process group as DDP's bucket
// AllReduces (and DDP's fingerprint / buffer broadcasts). Collectives on one
// group must be issued in the same order on every rank, and they are:
//  - forward: DDP broadcasts buffers and checks its fingerprint before calling
//    the module; the module's layers then run in program order, identical on
//    every rank (same model, same code), each SyncBatchNorm waiting for its
//    AllReduce before the next layer starts.
//  - backward: the engine runs nodes in an order fixed by the graph (ready
//    queue ordered by sequence number, see autograd/engine.h), which is the
//    same graph on every rank. DDP's buckets are launched from AccumulateGrad
//    post-hooks in strict bucket-index order (Note [Bucket launch order]), and
//    a bucket is ready once a fixed set of AccumulateGrad nodes has run. So
//    the interleaving "bucket k launched, then SyncBatchNormBackward of layer
//    j AllReduces" is a function of the graph, not of timing: every rank
//    issues the same sequence. SyncBatchNormBackward always issues its
//    AllReduce (even when no input gradient is needed), so the sequence does
//    not depend on which edges are live either.
// A graph that differs across ranks (data-dependent control flow) would break
// this, as it breaks DDP itself without find_unused_parameters.
//
// Read before: nn/batch_norm.h (Note [BatchNorm group statistics]),
// distributed/process_group/process_group.h. Read next: tests/distributed/test_sync_batch_norm.cpp.
#pragma once

#include <memory>

#include "distributed/process_group/process_group.h"
#include "nn/batch_norm.h"

namespace lockstep::distributed {

// The group-statistics strategy SyncBatchNorm installs into a BatchNorm2d.
class SyncBatchNormStatistics final : public nn::BatchNormGroupStatistics {
 public:
  explicit SyncBatchNormStatistics(std::shared_ptr<ProcessGroup> group);
  Tensor forward(nn::BatchNorm2d& bn, const Tensor& input) override;  // (N, C, H, W)
  const std::shared_ptr<ProcessGroup>& group() const { return group_; }

 private:
  std::shared_ptr<ProcessGroup> group_;
};

struct SyncBatchNorm : nn::BatchNorm2d {
  SyncBatchNorm(int64_t num_features, std::shared_ptr<ProcessGroup> group, double eps = 1e-5,
                double momentum = 0.1);
  std::string type_name() const override { return "SyncBatchNorm"; }
};

// The synchronised batch_norm op itself (training mode), recording
// SyncBatchNormBackward when autograd needs it. running_mean / running_var
// (C) are updated in place. input (N, C, *), weight / bias (C) or undefined.
Tensor sync_batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias,
                       const Tensor& running_mean, const Tensor& running_var, double momentum,
                       double eps, const std::shared_ptr<ProcessGroup>& group);

// PyTorch's torch.nn.SyncBatchNorm.convert_sync_batchnorm: every BatchNorm2d in
// `module` (itself included) computes its training statistics over `group`
// from now on. The layers are converted in place rather than replaced, so
// their weights, buffers and the models' typed members stay as they are (see
// Note [BatchNorm group statistics]). Returns `module`. Call it on every rank,
// before wrapping the model in DistributedDataParallel.
std::shared_ptr<nn::Module> convert_sync_batchnorm(std::shared_ptr<nn::Module> module,
                                                   std::shared_ptr<ProcessGroup> group);
template <class M>
std::shared_ptr<M> convert_sync_batchnorm(std::shared_ptr<M> module,
                                          std::shared_ptr<ProcessGroup> group) {
  convert_sync_batchnorm(std::static_pointer_cast<nn::Module>(module), std::move(group));
  return module;
}

}  // namespace lockstep::distributed
