// bench/flat_reducer.h — bench_ddp's --mode flat: every gradient copied into one
// flat buffer after backward, AllReduced in one call and averaged back — the
// baseline DDP's bucketed, overlapped reduction is measured against.
// Read before: distributed/process_group/process_group.h. Used by: bench/bench_ddp.cpp.
#pragma once

#include <vector>

#include "core/factory.h"
#include "core/grad_mode.h"
#include "distributed/process_group/process_group.h"

namespace lockstep::bench {

class FlatReducer {
 public:
  FlatReducer(std::vector<Tensor> params, Device device) : params_(std::move(params)) {
    int64_t n = 0;
    for (const Tensor& p : params_) n += p.numel();
    flat_ = zeros({n}, TensorOptions().device(device));  // (total params) beside the parameters
  }
  void reduce(distributed::ProcessGroup& pg) {
    NoGradGuard no_grad;
    int64_t offset = 0;
    for (const Tensor& p : params_) {
      const int64_t n = p.numel();
      if (p.grad().defined()) flat_.narrow(0, offset, n).copy_(p.grad().reshape({-1}));
      else flat_.narrow(0, offset, n).zero_();
      offset += n;
    }
    pg.allreduce(flat_)->wait(pg.timeout());
    flat_.mul_(1.0 / pg.size());
    offset = 0;
    for (Tensor& p : params_) {
      const int64_t n = p.numel();
      if (p.grad().defined()) p.mutable_grad().copy_(flat_.narrow(0, offset, n).view(p.sizes()));
      offset += n;
    }
  }

 private:
  std::vector<Tensor> params_;
  Tensor flat_;  // (total params)
};

}  // namespace lockstep::bench
