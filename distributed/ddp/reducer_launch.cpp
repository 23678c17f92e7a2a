// distributed/ddp/reducer_launch.cpp — DDP's own reductions as comm hooks, and the
// checks around a registered one (Note [Every launch through a comm hook] in
// reducer_launch.h, which declares BucketLauncher).
// presummed_allreduce below is where a bucket's AllReduce is called
// (Reducer::launch -> BucketLauncher::launch -> the hook chosen in its constructor): the
// process group queues it for its worker thread and returns at once
// (distributed/process_group/work_queue.cpp), so backward goes on while it runs.
// Read before: distributed/ddp/reducer_launch.h, distributed/ddp/reducer.cpp.
// Read next: distributed/ddp/distributed_data_parallel.h.
#include "distributed/ddp/reducer_launch.h"

#include "distributed/ddp/deterministic_reduction.h"
#include "distributed/ddp/reducer_timeline.h"

namespace lockstep::distributed {

namespace {

// The paper's reduction: the bucket holds grad / world; SUM it over the ranks.
// The timeline's span of the bucket ends when the AllReduce completes.
CommHook presummed_allreduce(std::shared_ptr<ProcessGroup> process_group, const int64_t& iteration) {
  return [process_group = std::move(process_group), &iteration](GradBucket& bucket) {
    Tensor& flat = bucket.buffer();  // (numel of the bucket)
    if (flat.numel() == 0) return TensorFuture::ready(flat);
    std::shared_ptr<Work> work = process_group->allreduce(flat, ReduceOp::SUM);
    timeline::async_end_when(timeline_key(iteration, bucket.index()), [work] { return work->is_completed(); });
    return TensorFuture::from_work(std::move(work), flat);
  };
}

// Note [Deterministic reduction]: the ranks' scaled buckets added in rank order.
CommHook presummed_rank_ordered_sum(std::shared_ptr<ProcessGroup> process_group) {
  return [process_group = std::move(process_group)](GradBucket& bucket) {
    return rank_ordered_sum(*process_group, bucket.buffer());
  };
}

}  // namespace

BucketLauncher::BucketLauncher(std::shared_ptr<ProcessGroup> process_group, const DDPOptions& options,
                               const int64_t& iteration)
    : process_group_(std::move(process_group)), iteration_(iteration), deterministic_(options.deterministic()) {
  hook_ = deterministic_ ? presummed_rank_ordered_sum(process_group_) : presummed_allreduce(process_group_, iteration_);
}

void BucketLauncher::replace_allreduce(CommHook reduction, const char* what) {
  if (registered_ || deterministic_) return;  // they reduce whole buckets their own way
  hook_ = std::move(reduction);
  if (what != nullptr) what_ = what;
}

void BucketLauncher::register_hook(CommHook hook, bool started) {
  const int rank = process_group_->rank();
  LS_CHECK(hook != nullptr, "DDP (rank ", rank, "): register_comm_hook was given an empty hook");
  LS_CHECK(!registered_, "DDP (rank ", rank, "): register_comm_hook can be called only once; "
           "a communication hook is already registered");
  LS_CHECK(!started, "DDP (rank ", rank, "): register_comm_hook "
           "must be called before the first synced forward/backward (buckets already hold gradients "
           "scaled for the default AllReduce). Register it right after constructing DistributedDataParallel");
  LS_CHECK(!deterministic_, "DDP (rank ", rank, "): register_comm_hook with DDPOptions().deterministic(true): "
           "deterministic mode reduces every bucket itself (Note [Deterministic reduction]); drop the option, or "
           "register comm_hooks::deterministic_allreduce_hook without it");
  hook_ = std::move(hook);
  registered_ = true;
}

TensorFuture BucketLauncher::launch(GradBucket& bucket) const {
  if (!registered_) return hook_(bucket);
  TensorFuture future;
  try {
    future = hook_(bucket);
  } catch (const std::exception& e) {
    throw CommHookError(lockstep::detail::str("DDP (rank ", process_group_->rank(), "): the communication hook "
                                              "failed on bucket ", bucket.index(), ": ", e.what()));
  }
  if (!future.valid()) {
    throw CommHookError(lockstep::detail::str("DDP (rank ", process_group_->rank(), "): the communication hook "
                                              "returned an empty TensorFuture for bucket ", bucket.index(),
                                              "; return TensorFuture::ready(t) or TensorFuture::from_work(work, t)"));
  }
  return future;
}

const char* BucketLauncher::what_reduces() const {
  return registered_ ? "the communication hook of bucket " : what_;
}

}  // namespace lockstep::distributed
