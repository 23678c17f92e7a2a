// nn/batch_norm.h — BatchNorm2d: per-channel normalisation of (N, C, H, W).
//
// Parameters weight (C, ones) and bias (C, zeros); buffers running_mean (C,
// zeros), running_var (C, ones) and num_batches_tracked (int64, 0-d), all with
// PyTorch's names and order, so state dicts line up with torchvision's.
// Training: normalises with the batch statistics and updates the running ones
// in place (running = (1 - momentum) * running + momentum * batch, with the
// unbiased batch variance), and counts the batch. Eval: uses the running
// statistics. DDP broadcasts these buffers from rank 0 before each forward.
//
// § Note [BatchNorm group statistics]
// `group_statistics`, when set, takes over the training-mode forward: it computes
// the statistics over more than this process's batch (distributed::SyncBatchNorm
// sets it; distributed::convert_sync_batchnorm sets it on existing layers, so
// models that hold `std::shared_ptr<BatchNorm2d>` members need no change). It
// must update the running statistics and num_batches_tracked itself. Eval
// mode never uses it. nn cannot see distributed/, hence the interface here.
// Read before: nn/conv.h. Read next: nn/layer_norm.h.
#pragma once

#include "nn/unary_module.h"

namespace lockstep::nn {

struct BatchNorm2d;

// See Note [BatchNorm group statistics].
struct BatchNormGroupStatistics {
  virtual ~BatchNormGroupStatistics() = default;
  virtual Tensor forward(BatchNorm2d& bn, const Tensor& input) = 0;  // (N, C, H, W) -> same
};

struct BatchNorm2d : UnaryModule {
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1);

  std::string type_name() const override { return "BatchNorm2d"; }
  bool runs_forward_pre_hooks() const override { return true; }  // Note [Forward pre-hooks]
  LS_NOT_A_HOLDER(BatchNorm2d)
  Tensor forward(const Tensor& input) override;  // (N, C, H, W) -> (N, C, H, W)

  int64_t num_features;
  double eps, momentum;
  Tensor weight, bias;                                     // (C)
  Tensor running_mean, running_var, num_batches_tracked;  // (C), (C), () int64
  std::shared_ptr<BatchNormGroupStatistics> group_statistics;  // null: this batch only
};

}  // namespace lockstep::nn
