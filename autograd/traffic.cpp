// autograd/traffic.cpp — bytes of an op's operands and results.
// Read before: autograd/traffic.h.
#include "autograd/traffic.h"

#include <algorithm>

#include "core/tensor_impl.h"

namespace lockstep::autograd {

int64_t distinct_bytes(const Tensor& t) {
  if (!t.defined()) return 0;
  int64_t elements = 1;
  const IntList& sizes = t.sizes();
  const IntList& strides = t.strides();
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (strides[d] != 0) elements *= sizes[d];
  }
  if (t.numel() == 0) elements = 0;
  return elements * static_cast<int64_t>(t.element_size());
}

namespace {

bool aliases_an_input(const Tensor& out, const std::vector<Tensor>& inputs) {
  for (const Tensor& in : inputs) {
    if (in.defined() && in.impl()->storage == out.impl()->storage) return true;
  }
  return false;
}

}  // namespace

void count_op_bytes_slow(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
  int64_t written = 0;
  bool moves = false;  // some result is new memory
  for (const Tensor& out : outputs) {
    if (!out.defined() || aliases_an_input(out, inputs)) continue;
    moves = true;
    written += distinct_bytes(out);
  }
  if (!moves) return;
  int64_t read = 0;
  for (const Tensor& in : inputs) read += distinct_bytes(in);
  profiler::add_bytes(read + written);
}

NodeTraffic::NodeTraffic(const std::vector<Tensor>& inputs) : on_(profiler::is_enabled()) {
  if (!on_) return;
  for (const Tensor& in : inputs) {
    if (!in.defined()) continue;
    read_ += distinct_bytes(in);
    storages_.push_back(in.impl()->storage.get());
  }
}

void NodeTraffic::finish(const std::vector<Tensor>& outputs) {
  if (!on_) return;
  int64_t written = 0;
  bool moves = false;
  for (const Tensor& out : outputs) {
    if (!out.defined()) continue;
    const void* s = out.impl()->storage.get();
    if (std::find(storages_.begin(), storages_.end(), s) != storages_.end()) continue;
    moves = true;
    written += distinct_bytes(out);
  }
  // A node that only hands its gradients on (as views) moves nothing; one that
  // returns none (AccumulateGrad) counts its own bytes.
  if (moves) profiler::add_bytes(read_ + written);
}

}  // namespace lockstep::autograd
