// autograd/double_backward.cpp — saved outputs with history, and the node that
// refuses a second backward (Note [Double backward]).
// Read before: autograd/double_backward.h.
#include "autograd/double_backward.h"

#include "autograd/function.h"
#include "core/autograd_meta.h"
#include "core/grad_mode.h"

namespace lockstep::autograd {

namespace {

// The grad_fn of a gradient computed, with create_graph, by a node whose formula
// does not record: reaching it in a backward is an error.
class DoubleBackwardNotImplemented final : public Node {
 public:
  explicit DoubleBackwardNotImplemented(std::string node_name) : node_name_(std::move(node_name)) {}
  std::string name() const override { return "DoubleBackwardNotImplemented(" + node_name_ + ")"; }
  variable_list apply(variable_list&& /*grads*/) override {
    throw Error("double backward through " + node_name_ + " is not implemented; ops that "
                "support it: " + double_backward_ops() + ". The gradient was taken with "
                "create_graph=true through " + node_name_ + ", and differentiating it again "
                "needs that op's second derivative");
  }

 private:
  std::string node_name_;
};

}  // namespace

const std::string& double_backward_ops() {
  static const std::string ops =
      "AddBackward, SubBackward, MulBackward, DivBackward, NegBackward, the scalar + - * / "
      "nodes, PowBackward (scalar exponent), SumBackward, MeanBackward, MaxBackward, MinBackward, "
      "MaxDimBackward, MinDimBackward, MaximumBackward, "
      "MinimumBackward, WhereBackward, MatmulBackward, BmmBackward, LinearBackward, "
      "Conv2dBackward, ConvTranspose2dBackward, BatchNormBackward, BatchNormReluBackward, "
      "BatchNormAddReluBackward, LayerNormBackward, "
      "ReluBackward, AddReluBackward, LeakyReluBackward, DropoutBackward, DropoutAddBackward, GeluBackward, TanhBackward, SigmoidBackward, ExpBackward, LogBackward, "
      "SqrtBackward, RsqrtBackward, AbsBackward, SinBackward, CosBackward, SoftmaxBackward, "
      "LogSoftmaxBackward, CrossEntropyBackward, MseLossBackward, "
      "BinaryCrossEntropyWithLogitsBackward, MaxPool2dBackward, AdaptiveAvgPool2dBackward, "
      "NarrowBackward, SelectBackward, IndexSelectBackward, GatherBackward, ScatterBackward, "
      "EmbeddingBackward, CatBackward, StackBackward, UnbindBackward, ViewBackward, ReshapeBackward, "
      "FlattenBackward, (Un)SqueezeBackward, ExpandBackward, TransposeBackward, "
      "PermuteBackward, CloneBackward, ToCopyBackward, ToDeviceBackward, CheckpointBackward, "
      "SyncBatchNormBackward, LSTMLayerBackward, GRULayerBackward, CudnnLSTMLayerBackward, "
      "CudnnGRULayerBackward, LinearAutocastBackward (CPU)";
  return ops;
}

Tensor saved_result(const SavedVariable& saved, Node& node) {
  Tensor y = saved.unpack(node.name());
  if (!GradMode::is_enabled() || !y.defined()) return y;
  // A new handle on the same data whose grad_fn is the node: gradients flowing
  // into it reach the node as gradients of its output 0. The handle is a
  // temporary of the formula, so the node does not keep itself alive.
  Tensor alias = y.detach();
  alias.impl()->autograd_meta = std::make_unique<AutogradMeta>();
  AutogradMeta& meta = *alias.impl()->autograd_meta;
  meta.requires_grad = true;
  meta.grad_fn = node.shared_from_this();
  meta.output_nr = 0;
  return alias;
}

void forbid_double_backward(const Node& node, const variable_list& grad_outputs,
                            variable_list& grads) {
  std::vector<Tensor> recorded_inputs;
  for (const Tensor& g : grad_outputs) {
    if (g.defined() && g.requires_grad()) recorded_inputs.push_back(g);
  }
  bool forward_inputs_need_grad = false;
  for (const Edge& e : node.next_edges()) forward_inputs_need_grad |= e.is_valid();
  if (recorded_inputs.empty() && !forward_inputs_need_grad) return;

  auto guard = std::make_shared<DoubleBackwardNotImplemented>(node.name());
  std::vector<Tensor> outputs;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;
    // A fresh handle: the node may have returned its incoming gradient itself,
    // whose history must not be overwritten (Note [Gradients returned by nodes]).
    grads[i] = grads[i].detach();
    outputs.push_back(grads[i]);
  }
  if (outputs.empty()) return;
  record(guard, recorded_inputs, outputs);
  // The forward inputs' edges too: the node's formula read them through its saved tensors.
  std::vector<Edge> edges = guard->next_edges();
  for (const Edge& e : node.next_edges()) {
    if (e.is_valid()) edges.push_back(e);
  }
  guard->set_next_edges(std::move(edges));
}

}  // namespace lockstep::autograd
