// core/grad_mode.h — whether ops record autograd history on this thread.
//
// Lives in core (like c10::GradMode in PyTorch) because in-place ops, defined
// in core, consult it. Optimizer steps and evaluation run under NoGradGuard.
// Read before: core/tensor.h. Read next: autograd/node.h.
#pragma once

namespace lockstep {

class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// RAII: sets gradient recording on this thread to `enabled` until destroyed
// (libtorch's AutoGradMode): AutoGradMode(true) records again inside a NoGradGuard,
// as a backward formula that builds a graph needs (autograd/engine.cpp, checkpoint.cpp).
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled) : previous_(GradMode::is_enabled()) {
    GradMode::set_enabled(enabled);
  }
  ~AutoGradMode() { GradMode::set_enabled(previous_); }
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool previous_;
};

// RAII: disables gradient recording on this thread until destroyed.
class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace lockstep
