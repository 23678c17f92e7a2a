// autograd/checkpoint.cpp — CheckpointBackward: recompute, then a nested
// backward through the recomputation (Note [Reentrant backward]), recorded
// under create_graph (Note [Checkpoint under create_graph]).
// Read before: autograd/checkpoint.h.
#include "autograd/checkpoint.h"

#include <memory>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/recompute_backward.h"
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

  // Note [Double backward]: under create_graph apply() runs with grad mode on
  // and takes the recording path.
  bool supports_double_backward() const override { return true; }

  variable_list apply(variable_list&& grad_outputs) override {
    return GradMode::is_enabled() ? apply_recorded(grad_outputs[0]) : apply_plain(grad_outputs[0]);
  }

  std::string name() const override { return "CheckpointBackward"; }
  void release_variables() override {
    for (auto& s : saved_) s.reset();
  }

 private:
  // fn re-run on `inputs` with grad mode on; its output checked against the forward's.
  Tensor recompute(const std::vector<Tensor>& inputs, const Tensor& grad) {
    Tensor out;
    {
      AutoGradMode grad_on(true);  // plain backward nodes run under NoGradGuard
      out = fn_(inputs);
    }
    LS_CHECK(out.defined() && out.sizes() == grad.sizes(), "checkpoint: recomputing the function "
             "in backward gave shape ", out.defined() ? out.shape_str() : std::string("(undefined)"),
             " but forward gave ", grad.shape_str(), "; the function must compute the same "
             "thing every time it runs (see autograd/checkpoint.h)");
    return out;
  }

  // A plain backward: fn on fresh leaves sharing the inputs' data, and a nested
  // backward that accumulates into the parameters fn uses (Note [Reentrant backward]).
  variable_list apply_plain(const Tensor& grad) {
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
    const Tensor out = recompute(leaves, grad);
    variable_list grads(saved_.size());
    if (!out.requires_grad()) return grads;  // nothing inside needs a gradient
    backward({out}, {grad});                 // Note [Reentrant backward]
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (needs_grad_[i]) grads[i] = leaves[i].grad();
    }
    return grads;
  }

  // § Note [Checkpoint under create_graph]
  // In a backward with create_graph (autograd::grad) the inputs' gradients must
  // keep their history, through the recomputation and back into the inputs'
  // own history, and no parameter's .grad may change. So fn is re-run on
  // aliases of the inputs (their saved handles with history, each behind an
  // identity node of its own), and a nested engine run with create_graph
  // captures what arrives at those identity nodes (Note [Capturing gradients]
  // in autograd/engine.h): the parameters' AccumulateGrad nodes do not run, and
  // the recorded gradients lead through the recomputed graph into the inputs and
  // the parameters, so a second backward reaches both. Capturing at the aliases
  // rather than at the inputs' own edges keeps an input computed from another
  // input (x and f(x) both passed) from being followed twice. The recomputed
  // graph is retained: the recorded gradients reuse its saved tensors.
  variable_list apply_recorded(const Tensor& grad) {
    std::vector<Tensor> inputs;
    for (const SavedVariable& s : saved_) inputs.push_back(s.unpack(name()));  // with history
    const auto reference = [&](const std::vector<Tensor>& aliases) {
      return std::vector<Tensor>{recompute(aliases, grad)};
    };
    return recorded_gradients(name(), inputs, reference, {grad});  // Note [Double backward by recomputation]
  }

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
