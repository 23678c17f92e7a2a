// expect: register_module takes a std::shared_ptr (std::make_shared<ls::nn::Linear>(...)) or a holder
// A libtorch habit that must not compile here. Read before: tests/frontend/check_idiom_errors.sh.
// libtorch (mnist.cpp): a holder member built in the initializer list, then `register_module("conv1", conv1);`
#include "nn/nn.h"
namespace ls = lockstep;
struct Net : ls::nn::Module {
  Net() : conv1(ls::nn::Conv2dOptions(1, 10, 5)) { register_module("conv1", conv1); }
  ls::nn::Conv2d conv1;
};
