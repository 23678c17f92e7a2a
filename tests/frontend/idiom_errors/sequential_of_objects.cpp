// expect: Sequential takes std::shared_ptr modules: std::make_shared<ls::nn::Sequential>(
// A libtorch habit that must not compile here. Read before: tests/frontend/check_idiom_errors.sh.
// libtorch (dcgan.cpp): `nn::Sequential generator(nn::Conv2d(...), nn::BatchNorm2d(256), nn::Functional(torch::relu));`
#include "nn/nn.h"
namespace ls = lockstep;
void f() {
  ls::nn::Sequential generator(ls::nn::Linear(3, 4), ls::nn::Functional(ls::relu));
}
