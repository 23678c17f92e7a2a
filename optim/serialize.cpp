// optim/serialize.cpp — ls::save / ls::load of optimizers and tensors.
// Read before: optim/serialize.h.
#include "optim/serialize.h"

namespace lockstep {

namespace {
constexpr const char* kOptimizerKey = "lockstep.optimizer";
constexpr const char* kTensorKey = "tensor";
}  // namespace

void save(const optim::Optimizer& optimizer, const std::string& path) {
  nn::save_tensors(optimizer.state_dict(), path, {{kOptimizerKey, optimizer.name()}});
}

void load(optim::Optimizer& optimizer, const std::string& path) {
  nn::Metadata metadata;
  optim::OptimizerState state = nn::load_tensors(path, &metadata);
  auto it = metadata.find(kOptimizerKey);
  LS_CHECK(it != metadata.end(), "ls::load(", optimizer.name(), ", '", path, "'): the file holds no "
           "optimizer state (no \"", kOptimizerKey, "\" metadata); write it with ls::save(optimizer, path)");
  LS_CHECK(it->second == optimizer.name(), "ls::load(", optimizer.name(), ", '", path, "'): the file holds ",
           it->second, " state; load it into a ", it->second, " optimizer");
  optimizer.load_state_dict(state);
}

void save(const Tensor& tensor, const std::string& path) {
  detail::check_defined(tensor, "ls::save");
  nn::save_tensors({{kTensorKey, tensor}}, path);
}

void load(Tensor& tensor, const std::string& path) {
  auto tensors = nn::load_tensors(path);
  auto it = tensors.find(kTensorKey);
  LS_CHECK(tensors.size() == 1 && it != tensors.end(), "ls::load(tensor, '", path, "'): expected a file "
           "written by ls::save(tensor, path), holding one tensor named \"", kTensorKey, "\"; it holds ",
           tensors.size(), " tensors (a module's or optimizer's file loads with ls::load(module|optimizer, path))");
  tensor = it->second;
}

}  // namespace lockstep
