// autograd/traffic.h — the bytes an op moves, counted from its tensors, for the
// profiler's bytes column (Note [Profiler bytes] in core/profiler.h).
//
//   count_op_bytes({x, w}, {out});   // inside the op's profiler::Scope
//
// Each operand counts as read once and each result as written once; a result
// that shares storage with an operand (a view, or an operand handed back as the
// result) moves nothing, and neither does an op all of whose results are such
// views. A broadcast operand (stride 0) counts the elements it really holds.
// These are the bytes a kernel that reads and writes each tensor once moves: a
// lower bound on the traffic of any kernel, and the same number on every CPU.
//
// Read before: core/profiler.h. Read next: autograd/function.cpp, autograd/engine.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "core/profiler.h"
#include "core/tensor.h"

namespace lockstep::autograd {

// The bytes of the distinct elements of `t` (0 for an undefined tensor).
int64_t distinct_bytes(const Tensor& t);

void count_op_bytes_slow(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs);

// Adds the op's bytes to the innermost profiler scope; one relaxed load while
// the profiler is off.
inline void count_op_bytes(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
  if (profiler::is_enabled()) count_op_bytes_slow(inputs, outputs);
}

// For the engine, which moves a node's incoming gradients into it: their bytes
// and storages are noted before the node runs, its results counted after.
class NodeTraffic {
 public:
  explicit NodeTraffic(const std::vector<Tensor>& inputs);
  void finish(const std::vector<Tensor>& outputs);

 private:
  bool on_ = false;
  int64_t read_ = 0;
  std::vector<const void*> storages_;  // the inputs' storages (not kept alive)
};

}  // namespace lockstep::autograd
