// expect: nn::Linear is a module, not a holder: declare std::shared_ptr<ls::nn::Linear>
// A libtorch habit that must not compile here. Read before: tests/frontend/check_idiom_errors.sh.
// libtorch: `torch::nn::Linear fc1{nullptr};` then `fc1 = register_module("fc1", torch::nn::Linear(784, 64));`
#include "nn/nn.h"
namespace ls = lockstep;
struct Net : ls::nn::Module {
  ls::nn::Linear fc1{nullptr};
};
Net net;
