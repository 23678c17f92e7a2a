// autograd/accumulate_grad.cpp — summing gradients into .grad and running
// post-accumulate-grad hooks (see Note [Post-accumulate-grad hooks]): the last
// lines of AccumulateGrad::apply are where DDP's gradient hook fires.
// Read before: autograd/accumulate_grad.h. Read next: autograd/engine.h.
#include "autograd/accumulate_grad.h"

#include "autograd/traffic.h"

#include <algorithm>

#include "core/autograd_meta.h"
#include "core/grad_mode.h"
#include "core/native/native.h"

namespace lockstep::autograd {

AccumulateGrad::AccumulateGrad(Tensor variable)
    : Node(kMaxSequenceNr), variable_(std::move(variable)) {}

namespace {

// Sums `incoming` into `grad` (sets it, the first time), in the leaf's dtype.
void accumulate(Tensor& grad, Tensor incoming, ScalarType leaf_dtype) {
  if (incoming.dtype() != leaf_dtype) {
    const int64_t before = distinct_bytes(incoming);  // a bf16 gradient of a float32 leaf
    incoming = native::to_dtype(incoming, leaf_dtype);
    profiler::add_bytes(before + distinct_bytes(incoming));
  }
  if (!grad.defined()) {
    // Take the incoming buffer when nothing else can see it; otherwise copy, so
    // a later in-place accumulation cannot change another tensor.
    const bool exclusive = incoming.impl_ptr().use_count() == 1 &&
                           incoming.impl()->storage.use_count() == 1 && incoming.is_contiguous();
    grad = exclusive ? incoming : native::clone(incoming);
    // Note [Profiler bytes]: a stolen gradient moves nothing, a copy is read and written.
    if (!exclusive) profiler::add_bytes(2 * distinct_bytes(grad));
  } else {
    NoGradGuard no_grad;
    grad.add_(incoming);
    profiler::add_bytes(3 * distinct_bytes(grad));  // incoming read, .grad read and written
  }
}

}  // namespace

variable_list AccumulateGrad::apply(variable_list&& grads) {
  Tensor incoming = std::move(grads.at(0));
  if (!incoming.defined()) return {};
  LS_CHECK(incoming.sizes() == variable_.sizes(), "AccumulateGrad: gradient of shape ",
           incoming.shape_str(), " does not match the leaf's shape ", variable_.shape_str(),
           " (a backward formula returned a wrongly shaped gradient)");
  Tensor& grad = variable_.mutable_grad();
  const GradSink& sink = variable_.impl()->autograd_meta->grad_sink;
  Tensor placed = !grad.defined() && sink ? sink(incoming) : Tensor();
  if (placed.defined()) {
    // Note [Gradient sinks]: one pass, the incoming gradient read and the placed one written.
    profiler::add_bytes(distinct_bytes(incoming) + distinct_bytes(placed));
    grad = std::move(placed);
  } else {
    accumulate(grad, std::move(incoming), variable_.dtype());
  }
  // The post-accumulate-grad hooks: DDP's gradient hook (Reducer::autograd_hook,
  // distributed/ddp/reducer.cpp) fires here. Copy the list: a hook may register or
  // remove hooks while we iterate.
  auto hooks = variable_.impl()->autograd_meta->post_accumulate_grad_hooks;
  for (auto& [id, hook] : hooks) hook(variable_);
  return {};
}

std::shared_ptr<AccumulateGrad> grad_accumulator(const Tensor& leaf) {
  LS_CHECK(leaf.is_leaf() && leaf.requires_grad(),
           "grad_accumulator: only leaf tensors that require grad have one (tensor of shape ",
           leaf.shape_str(), ")");
  AutogradMeta& meta = *leaf.impl()->autograd_meta;
  if (auto existing = meta.grad_accumulator.lock()) {
    return std::static_pointer_cast<AccumulateGrad>(existing);
  }
  // The node holds a handle to the same TensorImpl, so accumulating through it
  // updates the user's tensor.
  auto node = std::make_shared<AccumulateGrad>(leaf);
  meta.grad_accumulator = node;
  return node;
}

bool set_grad_sink(const Tensor& leaf, GradSink sink) {
  LS_CHECK(leaf.is_leaf() && leaf.requires_grad(), "set_grad_sink: only leaf tensors that require grad have "
           "a gradient sink (tensor of shape ", leaf.shape_str(), ")");
  GradSink& slot = leaf.impl()->autograd_meta->grad_sink;
  if (slot) return false;
  slot = std::move(sink);
  return true;
}

void clear_grad_sink(const Tensor& leaf) {
  if (leaf.impl()->autograd_meta) leaf.impl()->autograd_meta->grad_sink = nullptr;
}

size_t post_accumulate_grad_hook_count(const Tensor& leaf) {
  return leaf.impl()->autograd_meta ? leaf.impl()->autograd_meta->post_accumulate_grad_hooks.size() : 0;
}

void HookHandle::remove() {
  if (auto impl = tensor_.lock()) {
    std::erase_if(impl->autograd_meta->post_accumulate_grad_hooks,
                  [this](const auto& entry) { return entry.first == id_; });
  }
  tensor_.reset();
}

}  // namespace lockstep::autograd

namespace lockstep {

autograd::HookHandle Tensor::register_post_accumulate_grad_hook(
    std::function<void(Tensor&)> fn) const {
  detail::check_defined(*this, "register_post_accumulate_grad_hook");
  LS_CHECK(is_leaf() && requires_grad(), "register_post_accumulate_grad_hook: only leaf tensors "
           "that require grad accumulate gradients (tensor of shape ", shape_str(),
           (is_leaf() ? " does not require grad" : " was produced by an op"), ")");
  AutogradMeta& meta = *impl()->autograd_meta;
  uint64_t id = meta.next_hook_id++;
  meta.post_accumulate_grad_hooks.emplace_back(id, std::move(fn));
  return autograd::HookHandle(impl_ptr(), id);
}

}  // namespace lockstep
