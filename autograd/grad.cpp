// autograd/grad.cpp — autograd::grad's checks around the engine's capture mode.
// Read before: autograd/grad.h.
#include "autograd/grad.h"

#include <string>

#include "autograd/engine.h"

namespace lockstep::autograd {

namespace {

std::string describe(const char* what, size_t i, const Tensor& t) {
  return std::string(what) + " " + std::to_string(i) + " (shape " + t.shape_str() + ")";
}

// `t`, output or input number i, is defined and requires grad; `why_not` ends the message.
void check_requires_grad(const char* what, size_t i, const Tensor& t, const char* why_not) {
  LS_CHECK(t.defined(), "autograd::grad: ", what, " ", i, " is an undefined tensor");
  LS_CHECK(t.requires_grad(), "autograd::grad: ", describe(what, i, t), why_not);
}

}  // namespace

variable_list grad(const variable_list& outputs, const variable_list& inputs,
                   const variable_list& grad_outputs, std::optional<bool> retain_graph,
                   bool create_graph, bool allow_unused) {
  LS_CHECK(!outputs.empty(), "autograd::grad: no outputs to differentiate");
  LS_CHECK(!inputs.empty(), "autograd::grad: no inputs to differentiate with respect to");
  LS_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "autograd::grad: got ",
           grad_outputs.size(), " grad_outputs for ", outputs.size(),
           " outputs; pass one per output (an undefined Tensor() means ones for a "
           "one-element output)");
  for (size_t j = 0; j < outputs.size(); ++j) {
    const Tensor& out = outputs[j];
    check_requires_grad("output", j, out,
                        " does not require grad and has no grad_fn; it was computed from no "
                        "tensor that requires grad, or under NoGradGuard");
    const Tensor& g = grad_outputs.empty() ? Tensor() : grad_outputs[j];
    if (g.defined()) {
      LS_CHECK(g.sizes() == out.sizes(), "autograd::grad: grad_outputs[", j, "] has shape ",
               g.shape_str(), " but output ", j, " has shape ", out.shape_str());
    } else {
      LS_CHECK(out.numel() == 1, "autograd::grad: ", describe("output", j, out),
               " is not a one-element tensor, so its gradient cannot be implicitly created; "
               "pass grad_outputs[", j, "] of that shape (e.g. ls::ones_like(output) for the "
               "gradient of its sum)");
    }
  }
  RunOptions options;
  options.retain_graph = retain_graph.value_or(create_graph);
  options.create_graph = create_graph;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_requires_grad("input", i, inputs[i],
                        " does not require grad, so no gradient is taken with respect to it; "
                        "call requires_grad_(true) on it (a leaf) before computing the outputs");
    options.capture.push_back(gradient_edge(inputs[i]));
  }

  variable_list result = run(outputs, grad_outputs, options);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!result[i].defined()) {
      LS_CHECK(allow_unused, "autograd::grad: ", describe("input", i, inputs[i]),
               " was not used to compute the outputs (no path leads from them to it); pass "
               "allow_unused=true to get an undefined tensor for it");
      continue;
    }
    // Gradients arrive in the dtype the op computed in (a bf16 gradient of a float32
    // leaf under autocast); return the input's, as AccumulateGrad stores it.
    if (result[i].dtype() != inputs[i].dtype()) result[i] = result[i].to(inputs[i].dtype());
  }
  return result;
}

}  // namespace lockstep::autograd
