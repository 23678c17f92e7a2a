// optim/serialize.h — ls::save / ls::load: libtorch's torch::save / torch::load for
// modules, optimizers and tensors.
//
//   ls::save(net, "net.safetensors");         // std::shared_ptr<M> or a holder (LS_MODULE)
//   ls::save(optimizer, "opt.safetensors");   // its state_dict(): hyper-parameters, buffers, steps
//   ls::save(samples, "samples.safetensors"); // one tensor
//   ls::load(net, "net.safetensors"); ls::load(optimizer, "opt.safetensors"); ls::load(samples, ...);
//
// Every file is a safetensors file written by nn::save_tensors (checksummed,
// replaced atomically; Note [Checkpoint checksum] in nn/serialize.h), so Python's
// safetensors reads it; libtorch's .pt archives are not read or written. An
// optimizer's file records the optimizer's name, and loading it into another
// kind of optimizer is an error that names both.
// Read before: nn/serialize.h, optim/optimizer.h. Read next: optim/lr_scheduler.h.
#pragma once

#include <concepts>
#include <memory>
#include <string>

#include "nn/module_holder.h"
#include "nn/serialize.h"
#include "optim/optimizer.h"

namespace lockstep {

template <class M>
  requires std::derived_from<M, nn::Module>
void save(const std::shared_ptr<M>& module, const std::string& path) {
  LS_CHECK(module != nullptr, "ls::save: the module pointer is null (path '", path, "')");
  nn::save(*module, path);
}
template <class M>
  requires std::derived_from<M, nn::Module>
void load(const std::shared_ptr<M>& module, const std::string& path) {
  LS_CHECK(module != nullptr, "ls::load: the module pointer is null (path '", path, "')");
  nn::load(*module, path);
}
template <class Impl>
void save(const nn::ModuleHolder<Impl>& module, const std::string& path) {
  nn::save(*module, path);
}
template <class Impl>
void load(const nn::ModuleHolder<Impl>& module, const std::string& path) {
  nn::load(*module, path);
}

void save(const optim::Optimizer& optimizer, const std::string& path);
void load(optim::Optimizer& optimizer, const std::string& path);

// The tensor is stored under the name "tensor"; load replaces `tensor` by the file's.
void save(const Tensor& tensor, const std::string& path);
void load(Tensor& tensor, const std::string& path);

}  // namespace lockstep
