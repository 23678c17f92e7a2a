// distributed/process_group/tensor_future.h — TensorFuture: a tensor that will be ready once
// some collectives have finished; what a communication hook returns
// (distributed/ddp/comm_hook.h).
//
//   TensorFuture f = TensorFuture::from_work(pg.allreduce(t), t);  // t, once summed
//   TensorFuture g = f.then([](const Tensor& sum) { return sum.to(kFloat32); });
//   Tensor r = g.wait(pg.timeout());
//
// Continuations (then / then_future) run on the thread that calls wait(), the
// first time it does, in chain order; wait() remembers the value, so a second
// wait returns it without running anything again.
//
// § Note [Continuations run on the waiting thread]
// A continuation may start more collectives (PowerSGD's second AllReduce). If
// it ran on the backend's thread when the first collective completed, two
// buckets' continuations could start their collectives in a different order on
// different ranks — the pairing bug of Note [Bucket launch order]. Running
// them where the Reducer waits (finalize_backward, on the compute thread, in
// bucket order) keeps every rank's sequence of collectives identical. The cost:
// a hook's later stages start only when backward has finished.
// Read before: distributed/process_group/work.h. Read next: distributed/ddp/comm_hook.h.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "distributed/process_group/work.h"

namespace lockstep::distributed {

class TensorFuture {
 public:
  TensorFuture() = default;  // not valid(): holds nothing
  // Already done.
  static TensorFuture ready(Tensor value);
  // `value` holds the result once `work` has completed (in-place collectives).
  static TensorFuture from_work(std::shared_ptr<Work> work, Tensor value);
  // `value` holds the result once every one of `works` has completed.
  static TensorFuture from_works(std::vector<std::shared_ptr<Work>> works, Tensor value);

  // fn(value of this future), run on the waiting thread.
  TensorFuture then(std::function<Tensor(const Tensor&)> fn) const;
  // fn may start collectives and returns their future; the result waits for it.
  TensorFuture then_future(std::function<TensorFuture(const Tensor&)> fn) const;

  // Waits (each collective at most `timeout`), runs the continuations once and
  // returns the value. Rethrows a collective's or a continuation's error.
  Tensor wait(std::chrono::milliseconds timeout) const;
  bool valid() const { return state_ != nullptr; }

 private:
  struct State {
    std::function<Tensor(std::chrono::milliseconds)> compute;
    bool done = false;
    Tensor value;
  };
  std::shared_ptr<State> state_;
};

}  // namespace lockstep::distributed
