// autograd/checkpoint.cpp — CheckpointBackward: recompute, then a nested
// backward through the recomputation (Note [Reentrant backward]).
// Read before: autograd/checkpoint.h.
#include "autograd/checkpoint.h"

#include <memory>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/saved_variable.h"
#include "core/grad_mode.h"
#include "core/native/native.h"

namespace lockstep::autograd {

namespace {

class CheckpointBackward final : public Node {
 public:
  CheckpointBackward(CheckpointFunction fn, const std::vector<Tensor>& inputs) : fn_(std::move(fn)) {
    for (const Tensor& t : inputs) {
      saved_.emplace_back(t);
      needs_grad_.push_back(t.defined() && t.requires_grad());
    }
  }

  variable_list apply(variable_list&& grad_outputs) override {
    // Fresh leaves sharing the inputs' data: the recomputed graph ends at them.
    std::vector<Tensor> leaves;
    for (size_t i = 0; i < saved_.size(); ++i) {
      Tensor t = saved_[i].unpack(name());
      if (!t.defined()) {
        leaves.push_back(t);
        continue;
      }
      Tensor leaf = t.detach();
      if (needs_grad_[i]) leaf.requires_grad_(true);
      leaves.push_back(leaf);
    }
    Tensor out;
    {
      AutoGradMode grad_on(true);  // backward nodes run under NoGradGuard
      out = fn_(leaves);
    }
    LS_CHECK(out.defined() && out.sizes() == grad_outputs.at(0).sizes(), "checkpoint: recomputing the function "
             "in backward gave shape ", out.defined() ? out.shape_str() : std::string("(undefined)"),
             " but forward gave ", grad_outputs.at(0).shape_str(), "; the function must compute the same "
             "thing every time it runs (see autograd/checkpoint.h)");
    variable_list grads(saved_.size());
    if (!out.requires_grad()) return grads;  // nothing inside needs a gradient
    backward({out}, {grad_outputs[0]});      // Note [Reentrant backward]
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (needs_grad_[i]) grads[i] = leaves[i].grad();
    }
    return grads;
  }

  std::string name() const override { return "CheckpointBackward"; }
  void release_variables() override {
    for (auto& s : saved_) s.reset();
  }

 private:
  CheckpointFunction fn_;
  std::vector<SavedVariable> saved_;
  std::vector<bool> needs_grad_;
};

}  // namespace

Tensor checkpoint(CheckpointFunction fn, std::vector<Tensor> inputs) {
  LS_CHECK(fn != nullptr, "checkpoint: the function is empty");
  if (!GradMode::is_enabled()) return fn(inputs);
  Tensor out;
  {
    NoGradGuard no_grad;  // keep none of fn's activations
    out = fn(inputs);
    LS_CHECK(out.defined(), "checkpoint: the function returned an undefined tensor");
    // The node becomes out's grad_fn: out must be a tensor of its own.
    for (const Tensor& t : inputs) {
      if (t.defined() && t.impl() == out.impl()) out = native::clone(out);
    }
  }
  // The parameters fn uses are invisible here, so the node is recorded whenever
  // grad mode is on, even if no input requires grad.
  auto node = std::make_shared<CheckpointBackward>(fn, inputs);
  record(node, inputs, {out});
  return out;
}

}  // namespace lockstep::autograd
