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
//
// § Note [A flat result in pieces]
// from_pieces(pieces, flat): `flat` is written by several collectives, piece
// k covering elements [pieces[k-1].end, pieces[k].end). wait() waits for all
// of them; pieces() lets a reader wait for a prefix only and start on it while
// the rest is still on the wire (DDP's hand-over of a bucket to ZeRO's shard
// step, Note [Handing a bucket over in pieces], distributed/ddp/bucket_handover_pieces.cpp).
// A future made any other way, or by then(), has no pieces.
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
  // One collective of a result in pieces: it writes the elements up to `end`
  // (exclusive) from the previous piece's end (Note [A flat result in pieces]).
  struct Piece {
    int64_t end = 0;
    std::shared_ptr<Work> work;
  };
  TensorFuture() = default;  // not valid(): holds nothing
  // Already done.
  static TensorFuture ready(Tensor value);
  // `value` holds the result once `work` has completed (in-place collectives).
  static TensorFuture from_work(std::shared_ptr<Work> work, Tensor value);
  // `value` holds the result once every one of `works` has completed.
  static TensorFuture from_works(std::vector<std::shared_ptr<Work>> works, Tensor value);
  // `value` (flat) written piece by piece; the ends ascend to value.numel().
  static TensorFuture from_pieces(std::vector<Piece> pieces, Tensor value);

  // fn(value of this future), run on the waiting thread.
  TensorFuture then(std::function<Tensor(const Tensor&)> fn) const;
  // fn may start collectives and returns their future; the result waits for it.
  TensorFuture then_future(std::function<TensorFuture(const Tensor&)> fn) const;

  // Waits (each collective at most `timeout`), runs the continuations once and
  // returns the value. Rethrows a collective's or a continuation's error.
  Tensor wait(std::chrono::milliseconds timeout) const;
  bool valid() const { return state_ != nullptr; }
  // The pieces of a future made by from_pieces (empty otherwise, or once waited for).
  const std::vector<Piece>& pieces() const;

 private:
  struct State {
    std::function<Tensor(std::chrono::milliseconds)> compute;
    bool done = false;
    Tensor value;
    std::vector<Piece> pieces;
  };
  std::shared_ptr<State> state_;
};

}  // namespace lockstep::distributed
