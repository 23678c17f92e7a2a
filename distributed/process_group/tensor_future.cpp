// distributed/process_group/tensor_future.cpp — a chain of waits and continuations, run once.
// Read before: distributed/process_group/tensor_future.h (Note [Continuations run on the waiting
// thread]).
#include "distributed/process_group/tensor_future.h"

#include "core/error.h"

namespace lockstep::distributed {

TensorFuture TensorFuture::ready(Tensor value) {
  TensorFuture f;
  f.state_ = std::make_shared<State>();
  f.state_->done = true;
  f.state_->value = std::move(value);
  return f;
}

TensorFuture TensorFuture::from_work(std::shared_ptr<Work> work, Tensor value) {
  LS_CHECK(work != nullptr, "TensorFuture::from_work: the Work is null");
  TensorFuture f;
  f.state_ = std::make_shared<State>();
  f.state_->compute = [work = std::move(work), value = std::move(value)](std::chrono::milliseconds timeout) {
    work->wait(timeout);
    return value;
  };
  return f;
}

TensorFuture TensorFuture::from_works(std::vector<std::shared_ptr<Work>> works, Tensor value) {
  for (const auto& w : works) LS_CHECK(w != nullptr, "TensorFuture::from_works: a Work is null");
  TensorFuture f;
  f.state_ = std::make_shared<State>();
  f.state_->compute = [works = std::move(works), value = std::move(value)](std::chrono::milliseconds timeout) {
    for (const auto& w : works) w->wait(timeout);
    return value;
  };
  return f;
}

TensorFuture TensorFuture::then(std::function<Tensor(const Tensor&)> fn) const {
  LS_CHECK(valid(), "TensorFuture::then: the future holds nothing (default-constructed)");
  TensorFuture f;
  f.state_ = std::make_shared<State>();
  f.state_->compute = [prev = *this, fn = std::move(fn)](std::chrono::milliseconds timeout) {
    return fn(prev.wait(timeout));
  };
  return f;
}

TensorFuture TensorFuture::then_future(std::function<TensorFuture(const Tensor&)> fn) const {
  LS_CHECK(valid(), "TensorFuture::then_future: the future holds nothing (default-constructed)");
  TensorFuture f;
  f.state_ = std::make_shared<State>();
  f.state_->compute = [prev = *this, fn = std::move(fn)](std::chrono::milliseconds timeout) {
    TensorFuture next = fn(prev.wait(timeout));
    LS_CHECK(next.valid(), "TensorFuture::then_future: the continuation returned an empty future");
    return next.wait(timeout);
  };
  return f;
}

Tensor TensorFuture::wait(std::chrono::milliseconds timeout) const {
  LS_CHECK(valid(), "TensorFuture::wait: the future holds nothing (default-constructed)");
  if (!state_->done) {
    state_->value = state_->compute(timeout);
    state_->done = true;
    state_->compute = nullptr;  // drop what the chain held (works, earlier values)
  }
  return state_->value;
}

}  // namespace lockstep::distributed
