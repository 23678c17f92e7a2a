// distributed/ddp/comm_hook.h — communication hooks: replace how DDP reduces a
// gradient bucket (PyTorch's register_comm_hook, with a C++ API).
//
//   auto state = std::make_shared<comm_hooks::PowerSGDState>(pg, comm_hooks::PowerSGDOptions());
//   ddp.register_comm_hook(state, comm_hooks::powersgd_hook);
//   // any callable (State&, GradBucket&) -> TensorFuture works:
//   ddp.register_comm_hook(pg, [](ProcessGroup& pg, GradBucket& b) {
//     native::binary_scalar_(native::BinaryOp::Mul, b.buffer(), 1.0 / b.divisor());
//     return TensorFuture::from_work(pg.allreduce(b.buffer()), b.buffer());
//   });
//
// § Note [Communication hooks]
// Without a hook the Reducer scales each gradient by 1/world while copying it
// into its bucket and AllReduces the bucket (SUM). With a hook the bucket holds
// the plain SUM-ready local gradients (accumulated over no_sync iterations, not
// divided), and when the bucket is full — in index order, like a default
// launch (Note [Bucket launch order]) — the Reducer calls hook(bucket) instead.
// The hook starts whatever collectives it wants and returns a TensorFuture
// whose value is the bucket's AVERAGED gradients, flat, of the bucket's numel
// (any floating dtype: it is copied back into the bucket). finalize_backward
// waits for the futures in bucket order; continuations run there (Note
// [Continuations run on the waiting thread]). Rules for a hook: every rank must
// register the same hook, and the hook must start the same collectives, in the
// same order, on every rank for the same bucket (decide from shapes and from
// state every rank updates the same way, never from gradient values of one
// rank). It may modify buffer() freely. Divide by divisor(), not by the group
// size: under join() with divide_by_initial_world_size(false) they differ.
// Hooks are also run, on zero-filled buckets, by ranks that have joined
// (distributed/ddp/ddp_join.h), so their collectives pair up with the others'.
// Built-ins: distributed/comm_hooks/default_hooks.h (allreduce, fp16, bf16)
// and distributed/comm_hooks/powersgd.h.
// Read before: distributed/process_group/tensor_future.h, distributed/ddp/bucket.h. Read next:
// distributed/comm_hooks/default_hooks.h, distributed/ddp/reducer.h.
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.h"
#include "distributed/process_group/tensor_future.h"

namespace lockstep::distributed {

// One bucket, as a hook sees it.
class GradBucket {
 public:
  GradBucket(size_t index, size_t num_buckets, Tensor buffer, std::vector<Tensor> parameters,
             std::vector<size_t> parameter_indices, std::vector<int64_t> offsets, double divisor)
      : index_(index), num_buckets_(num_buckets), buffer_(std::move(buffer)), parameters_(std::move(parameters)),
        parameter_indices_(std::move(parameter_indices)), offsets_(std::move(offsets)), divisor_(divisor) {}

  // Position of the bucket in launch order (0 = the first to fill).
  size_t index() const { return index_; }
  // The last bucket of this backward (one call per backward has it true).
  bool is_last() const { return index_ + 1 == num_buckets_; }
  // (numel of the bucket) the flat local gradients, SUM-ready, not yet divided.
  Tensor& buffer() { return buffer_; }
  // The bucket's parameters, in slice order.
  const std::vector<Tensor>& parameters() const { return parameters_; }
  // Their indices in DDP's parameter list (the trainable parameters, in registration order).
  const std::vector<size_t>& parameter_indices() const { return parameter_indices_; }
  // Element offset of each parameter's slice in buffer(), in slice order.
  const std::vector<int64_t>& offsets() const { return offsets_; }
  // Views of buffer() shaped like the parameters, in slice order.
  std::vector<Tensor> gradients() const {
    std::vector<Tensor> out;
    for (size_t k = 0; k < parameters_.size(); ++k) {
      out.push_back(buffer_.narrow(0, offsets_[k], parameters_[k].numel()).view(parameters_[k].sizes()));
    }
    return out;
  }
  // What the SUM over ranks must be divided by to give the average.
  double divisor() const { return divisor_; }

 private:
  size_t index_;
  size_t num_buckets_;
  Tensor buffer_;
  std::vector<Tensor> parameters_;
  std::vector<size_t> parameter_indices_;
  std::vector<int64_t> offsets_;
  double divisor_;
};

// The type-erased hook the Reducer calls (the state is captured).
using CommHook = std::function<TensorFuture(GradBucket&)>;

}  // namespace lockstep::distributed
