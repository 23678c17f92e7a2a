// expect: optimizers have one parameter group: use opt.set_lr(x) / opt.lr()
// A libtorch habit that must not compile here. Read before: tests/frontend/check_idiom_errors.sh.
// libtorch: `optimizer.param_groups()[0].options().set_lr(lr);` (the learning-rate loops of the examples)
#include "nn/nn.h"
#include "optim/optim.h"
namespace ls = lockstep;
void f() {
  auto net = std::make_shared<ls::nn::Linear>(2, 3);
  ls::optim::SGD optimizer(net->parameters(), 0.1);
  optimizer.param_groups()[0].options();
}
