// tests/distributed/ddp_beyond_util.h — models and helpers shared by the tests
// of DDP's features beyond the paper (gradient_as_bucket_view, bucket rebuild,
// communication hooks, join): a model whose registration order is the reverse
// of its execution order, per-rank batches, and cross-rank checks.
// Read before: tests/distributed/ddp_test_models.h, tests/support/multiprocess.h.
#pragma once

#include <cstdlib>
#include <memory>
#include <vector>

#include <doctest/doctest.h>

#include "distributed/distributed.h"
#include "optim/optim.h"
#include "tests/distributed/ddp_test_models.h"

namespace lockstep::testing {

// Registered last-to-first: fc3 (used last) is registered first, so reverse
// registration order — DDP's initial guess at the ready order — puts fc1's
// parameters first although backward produces them last. (B, 6) -> (B, 3).
struct ReorderedMLP : nn::Module {
  std::shared_ptr<nn::Linear> fc3, fc2, fc1;
  ReorderedMLP() {
    fc3 = register_module("fc3", std::make_shared<nn::Linear>(16, 3));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(16, 16));
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 16));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = fc1->forward(x).relu();  // (B, 16)
    h = fc2->forward(h).relu();         // (B, 16)
    return fc3->forward(h);             // (B, 3)
  }
};

// `count` rows of a (N, ...) tensor starting at chunk `chunk` of `per` rows.
// Sets LOCKSTEP_DDP_COPY_OUT_BY_REFERENCE for the DDP modules built in its scope
// (Note [Copy-out by reference]; off also turns DDP's gradient sinks off).
struct ByReference {
  explicit ByReference(bool on) { setenv("LOCKSTEP_DDP_COPY_OUT_BY_REFERENCE", on ? "1" : "0", 1); }
  ~ByReference() { unsetenv("LOCKSTEP_DDP_COPY_OUT_BY_REFERENCE"); }
};

inline Tensor chunk_rows(const Tensor& t, int64_t chunk, int64_t per) { return t.narrow(0, chunk * per, per); }

// Every rank holds bitwise the same values of `tensors`.
inline void check_same_on_all_ranks(const std::vector<Tensor>& tensors, distributed::ProcessGroup& pg) {
  for (const auto& t : tensors) {
    Tensor mine = t.detach().clone();
    std::vector<Tensor> all;
    pg.allgather(all, mine)->wait(pg.timeout());
    for (int r = 0; r < pg.size(); ++r) CHECK(equal(all[r], mine));
  }
}

// Bitwise equality of two parameter lists.
inline bool all_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!equal(a[i].detach(), b[i].detach())) return false;
  }
  return true;
}

// The gradients of `params`, cloned (undefined stays undefined).
inline std::vector<Tensor> grads_of(const std::vector<Tensor>& params) {
  std::vector<Tensor> out;
  for (const auto& p : params) out.push_back(p.grad().defined() ? p.grad().detach().clone() : Tensor());
  return out;
}

}  // namespace lockstep::testing

namespace lockstep::testing {

// Wraps a process group and records, for each allreduce, how many parameters'
// gradients had been accumulated when it was issued (`*hooks_fired`, counted by
// the test's own post-accumulate-grad hooks, which run after DDP's).
class LaunchRecordingGroup : public distributed::ProcessGroup {
 public:
  LaunchRecordingGroup(std::shared_ptr<distributed::ProcessGroup> inner, const int* hooks_fired)
      : ProcessGroup(inner->rank(), inner->size()), inner_(std::move(inner)), hooks_fired_(hooks_fired) {}
  std::string backend_name() const override { return "recording"; }
  std::shared_ptr<distributed::Work> allreduce(Tensor& t, distributed::ReduceOp op) override {
    grads_ready_at_launch.push_back(*hooks_fired_);
    return inner_->allreduce(t, op);
  }
  std::shared_ptr<distributed::Work> broadcast(Tensor& t, int root) override { return inner_->broadcast(t, root); }
  std::shared_ptr<distributed::Work> allgather(std::vector<Tensor>& o, const Tensor& i) override {
    return inner_->allgather(o, i);
  }
  std::shared_ptr<distributed::Work> reduce_scatter(Tensor& o, std::vector<Tensor>& i,
                                                    distributed::ReduceOp op) override {
    return inner_->reduce_scatter(o, i, op);
  }
  std::shared_ptr<distributed::Work> barrier() override { return inner_->barrier(); }
  std::shared_ptr<distributed::Work> send(const Tensor& t, int dst, int tag) override { return inner_->send(t, dst, tag); }
  std::shared_ptr<distributed::Work> recv(Tensor& t, int src, int tag) override { return inner_->recv(t, src, tag); }
  std::vector<int> grads_ready_at_launch;

 private:
  std::shared_ptr<distributed::ProcessGroup> inner_;
  const int* hooks_fired_;
};

}  // namespace lockstep::testing
