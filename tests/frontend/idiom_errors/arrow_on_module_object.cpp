// expect: are modules, not holders: hold them by std::shared_ptr
// A libtorch habit that must not compile here. Read before: tests/frontend/check_idiom_errors.sh.
// libtorch (dcgan.cpp): `generator->to(device);` on a Sequential value
#include "nn/nn.h"
namespace ls = lockstep;
void f(ls::nn::Sequential& generator) { generator->to(ls::Device(ls::kCPU)); }
