// autograd/recompute_backward.cpp — Note [Double backward by recomputation].
// Read before: autograd/recompute_backward.h.
#include "autograd/recompute_backward.h"

#include <memory>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "core/grad_mode.h"
#include "core/native/native.h"

namespace lockstep::autograd {

namespace {

// The identity, as the grad_fn of an alias of a recomputed node's input.
class RecomputeInputBackward final : public Node {
 public:
  std::string name() const override { return "RecomputeInputBackward"; }
  bool supports_double_backward() const override { return true; }
  variable_list apply(variable_list&& grads) override { return {grads[0]}; }
};

// Sends its incoming gradient on, converted to `dtype` (recorded under grad mode).
class WithHistoryBackward final : public Node {
 public:
  explicit WithHistoryBackward(ScalarType dtype) : dtype_(dtype) {}
  std::string name() const override { return "WithHistoryBackward"; }
  bool supports_double_backward() const override { return true; }
  variable_list apply(variable_list&& grads) override {
    const Tensor& g = grads[0];
    return {g.defined() && g.dtype() != dtype_ ? g.to(dtype_) : g};
  }

 private:
  ScalarType dtype_;
};

}  // namespace

Tensor with_history(const Tensor& data, const Edge& edge, ScalarType grad_dtype) {
  if (!edge.is_valid()) return data;
  Tensor alias = data.detach();
  auto node = std::make_shared<WithHistoryBackward>(grad_dtype);
  record(node, {}, {alias});
  node->set_next_edges({edge});
  return alias;
}

variable_list recorded_gradients(const std::string& op, const std::vector<Tensor>& inputs,
                                 const ReferenceFunction& reference, const variable_list& grad_outputs) {
  std::vector<Tensor> aliases;
  RunOptions options;
  options.retain_graph = true;
  options.create_graph = true;
  std::vector<size_t> captured_input;  // capture c is for input captured_input[c]
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor t = inputs[i];
    if (t.defined() && t.requires_grad()) {
      Tensor alias = t.detach();
      record(std::make_shared<RecomputeInputBackward>(), {t}, {alias});
      options.capture.push_back(gradient_edge(alias));
      captured_input.push_back(i);
      t = alias;
    }
    aliases.push_back(t);
  }
  std::vector<Tensor> outputs;
  {
    AutoGradMode grad_on(true);  // plain backward nodes run under NoGradGuard
    outputs = reference(aliases);
  }
  LS_CHECK(outputs.size() == grad_outputs.size(), op, ": its reference computation gave ",
           outputs.size(), " outputs for ", grad_outputs.size(), " incoming gradients");
  std::vector<Tensor> roots, seeds;
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (!grad_outputs[o].defined() || !outputs[o].defined() || !outputs[o].requires_grad()) continue;
    Tensor out = outputs[o];
    for (const Tensor& a : aliases) {
      if (a.defined() && a.impl() == out.impl()) out = out.clone();  // an input returned: own node
    }
    roots.push_back(out);
    seeds.push_back(grad_outputs[o]);
  }
  variable_list grads(inputs.size());
  if (roots.empty() || options.capture.empty()) return grads;
  const variable_list captured = run(roots, seeds, options);
  for (size_t c = 0; c < captured.size(); ++c) grads[captured_input[c]] = captured[c];
  return grads;
}

}  // namespace lockstep::autograd
