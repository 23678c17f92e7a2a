// expect: lockstep: write LS_MODULE(Net)
// A libtorch habit that must not compile here. Read before: tests/frontend/check_idiom_errors.sh.
// libtorch: `TORCH_MODULE(Net);` after `struct NetImpl : torch::nn::Module {...};`
#include "nn/nn.h"
namespace ls = lockstep;
struct NetImpl : ls::nn::Module {};
TORCH_MODULE(Net);
