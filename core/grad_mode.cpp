// core/grad_mode.cpp — the thread-local grad-mode flag.
// Read before: core/grad_mode.h.
#include "core/grad_mode.h"

namespace lockstep {

namespace {
thread_local bool grad_enabled = true;
}

bool GradMode::is_enabled() { return grad_enabled; }
void GradMode::set_enabled(bool enabled) { grad_enabled = enabled; }

}  // namespace lockstep
