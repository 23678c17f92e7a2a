// models/resnet.cpp — building the ResNet stages and blocks.
//
// Forward passes fuse each BatchNorm followed by a ReLU into batch_norm_relu,
// and each block's last BatchNorm, residual add and ReLU into batch_norm_add_relu
// (Note [Fused BatchNorm + add + ReLU]), or, in a block that downsamples, with the
// downsample's BatchNorm folded in too, into batch_norm_add_batch_norm_relu (Note
// [Downsample batch norm folded] in core/native/fast/batch_norm_bf16_nhwc_pair.cpp;
// its conv runs as before; under bf16 the sum is taken before the downsample's
// output is rounded), and the stem's bn1, relu and maxpool into
// batch_norm_relu_max_pool2d: the same arithmetic
// as torchvision's relu(bn(x)) and relu(out + identity) with ReLU(inplace=True),
// and the same activations kept alive (Note [Fused BatchNorm + ReLU] in
// autograd/functions/batch_norm.cpp). The modules are unchanged (bn1, relu, ...),
// so names and state_dict keys stay torchvision's.
// Read before: models/resnet.h.
#include "models/resnet.h"

#include <typeinfo>

#include "core/grad_mode.h"
#include "core/nn_ops.h"

namespace lockstep::models {

namespace {

// bn.forward(x).relu() as one op: BatchNorm2d::forward's bookkeeping (count the
// batch when training) with the fused kernel; input checks are the kernel's. A
// layer whose training statistics come from elsewhere (SyncBatchNorm: Note
// [BatchNorm group statistics] in nn/batch_norm.h) keeps its own forward.
Tensor bn_relu(nn::BatchNorm2d& bn, const Tensor& x) {  // (N, C, H, W) -> same
  if (bn.is_training() && bn.group_statistics) return bn.forward(x).relu();
  bn.run_forward_pre_hooks();  // it reads bn's parameters: Note [Forward pre-hooks], nn/module.h
  if (bn.is_training()) {
    NoGradGuard no_grad;
    bn.num_batches_tracked.add_(1.0);
  }
  return batch_norm_relu(x, bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.is_training(),
                         bn.momentum, bn.eps);
}

// add_relu(bn.forward(x), identity) as one op (Note [Fused BatchNorm + add +
// ReLU] in autograd/functions/batch_norm.cpp), with bn_relu's bookkeeping.
Tensor bn_add_relu(nn::BatchNorm2d& bn, const Tensor& x, const Tensor& identity) {
  if (bn.is_training() && bn.group_statistics) return add_relu(bn.forward(x), identity);
  bn.run_forward_pre_hooks();  // it reads bn's parameters: Note [Forward pre-hooks], nn/module.h
  if (bn.is_training()) {
    NoGradGuard no_grad;
    bn.num_batches_tracked.add_(1.0);
  }
  return batch_norm_add_relu(x, identity, bn.weight, bn.bias, bn.running_mean, bn.running_var,
                             bn.is_training(), bn.momentum, bn.eps);
}

// The downsample's batch norm when it can be folded into the block's last one
// (Note [Downsample batch norm folded] in core/native/fast/batch_norm_bf16_nhwc_pair.cpp):
// the downsample is still (conv, BatchNorm2d), and the two batch norms agree on
// training, momentum and eps and take their statistics from this batch. Else null.
nn::BatchNorm2d* foldable_downsample_bn(nn::Sequential& downsample, const nn::BatchNorm2d& bn) {
  if (downsample.size() != 2) return nullptr;
  auto* ds_bn = dynamic_cast<nn::BatchNorm2d*>(downsample[1].get());
  if (ds_bn == nullptr || ds_bn->is_training() != bn.is_training() ||
      ds_bn->momentum != bn.momentum || ds_bn->eps != bn.eps) {
    return nullptr;
  }
  if (bn.is_training() && (bn.group_statistics || ds_bn->group_statistics)) return nullptr;
  return ds_bn;
}

// relu(bn(x) + identity), identity = downsample(block_input) or the block input:
// bn_add_relu, with the downsample's batch norm folded in where it can be.
Tensor block_end(nn::BatchNorm2d& bn, const Tensor& x, nn::Sequential* downsample,
                 const Tensor& block_input) {
  if (downsample == nullptr) return bn_add_relu(bn, x, block_input);
  nn::BatchNorm2d* ds_bn = foldable_downsample_bn(*downsample, bn);
  if (ds_bn == nullptr) return bn_add_relu(bn, x, downsample->forward(block_input));
  const Tensor r = (*downsample)[0]->forward(block_input);  // the downsample's conv
  for (nn::BatchNorm2d* b : {&bn, ds_bn}) {  // each batch norm's bookkeeping, as bn_relu
    b->run_forward_pre_hooks();
    if (b->is_training()) {
      NoGradGuard no_grad;
      b->num_batches_tracked.add_(1.0);
    }
  }
  return batch_norm_add_batch_norm_relu(x, bn.weight, bn.bias, bn.running_mean, bn.running_var, r,
                                        ds_bn->weight, ds_bn->bias, ds_bn->running_mean,
                                        ds_bn->running_var, bn.is_training(), bn.momentum, bn.eps);
}

// pool(relu(bn(x))), the end of the stem: batch_norm_relu_max_pool2d (Note [Stem batch
// norm, ReLU and max-pool in one pass] in core/native/fast/batch_norm_relu_pool_bf16_nhwc.cpp)
// with bn_relu's bookkeeping; the two as before for a pool of another type (a subclass may
// pool otherwise) or a batch norm whose training statistics come from elsewhere.
Tensor stem_end(nn::BatchNorm2d& bn, nn::MaxPool2d& pool, const Tensor& x) {
  if (typeid(pool) != typeid(nn::MaxPool2d) || (bn.is_training() && bn.group_statistics)) {
    return pool.forward(bn_relu(bn, x));
  }
  bn.run_forward_pre_hooks();  // it reads bn's parameters: Note [Forward pre-hooks], nn/module.h
  if (bn.is_training()) {
    NoGradGuard no_grad;
    bn.num_batches_tracked.add_(1.0);
  }
  return batch_norm_relu_max_pool2d(x, bn.weight, bn.bias, bn.running_mean, bn.running_var,
                                    bn.is_training(), bn.momentum, bn.eps, pool.kernel_size,
                                    pool.stride, pool.padding);
}

std::shared_ptr<nn::Conv2d> conv(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad) {
  return std::make_shared<nn::Conv2d>(
      nn::Conv2dOptions(in, out, k).stride(stride).padding(pad).bias(false));
}

// Sequential(conv 1x1 stride s, bn) when the block changes shape, else null.
std::shared_ptr<nn::Sequential> make_downsample(int64_t in, int64_t out, int64_t stride) {
  if (stride == 1 && in == out) return nullptr;
  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back("0", conv(in, out, 1, stride, 0));
  seq->push_back("1", std::make_shared<nn::BatchNorm2d>(out));
  return seq;
}
}  // namespace

BasicBlock::BasicBlock(int64_t in_planes, int64_t planes, int64_t stride) {
  conv1 = register_module("conv1", conv(in_planes, planes, 3, stride, 1));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(planes));
  conv2 = register_module("conv2", conv(planes, planes, 3, 1, 1));
  bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(planes));
  if (auto ds = make_downsample(in_planes, planes, stride)) downsample = register_module("downsample", ds);
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = bn_relu(*bn1, conv1->forward(x));
  out = conv2->forward(out);
  return block_end(*bn2, out, downsample.get(), x);
}

Bottleneck::Bottleneck(int64_t in_planes, int64_t planes, int64_t stride) {
  conv1 = register_module("conv1", conv(in_planes, planes, 1, 1, 0));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(planes));
  conv2 = register_module("conv2", conv(planes, planes, 3, stride, 1));
  bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(planes));
  conv3 = register_module("conv3", conv(planes, planes * kExpansion, 1, 1, 0));
  bn3 = register_module("bn3", std::make_shared<nn::BatchNorm2d>(planes * kExpansion));
  if (auto ds = make_downsample(in_planes, planes * kExpansion, stride)) {
    downsample = register_module("downsample", ds);
  }
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor out = bn_relu(*bn1, conv1->forward(x));   // (N, planes, H, W)
  out = bn_relu(*bn2, conv2->forward(out));        // (N, planes, H/s, W/s)
  out = conv3->forward(out);                       // (N, 4 planes, H/s, W/s)
  return block_end(*bn3, out, downsample.get(), x);
}

ResNet::ResNet(bool bottleneck, const std::vector<int64_t>& layers, int64_t num_classes) {
  LS_CHECK(layers.size() == 4, "ResNet: expected 4 stage depths, got ", layers.size());
  const int64_t expansion = bottleneck ? Bottleneck::kExpansion : BasicBlock::kExpansion;
  conv1 = register_module("conv1", conv(3, 64, 7, 2, 3));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(64));
  register_module("relu", std::make_shared<nn::ReLU>());
  maxpool = register_module("maxpool", std::make_shared<nn::MaxPool2d>(3, 2, 1));
  int64_t in_planes = 64;
  auto make_stage = [&](int64_t planes, int64_t blocks, int64_t stride) {
    auto stage = std::make_shared<nn::Sequential>();
    for (int64_t b = 0; b < blocks; ++b) {
      int64_t s = b == 0 ? stride : 1;
      if (bottleneck) {
        stage->push_back(std::make_shared<Bottleneck>(in_planes, planes, s));
      } else {
        stage->push_back(std::make_shared<BasicBlock>(in_planes, planes, s));
      }
      in_planes = planes * expansion;
    }
    return stage;
  };
  layer1 = register_module("layer1", make_stage(64, layers[0], 1));
  layer2 = register_module("layer2", make_stage(128, layers[1], 2));
  layer3 = register_module("layer3", make_stage(256, layers[2], 2));
  layer4 = register_module("layer4", make_stage(512, layers[3], 2));
  avgpool = register_module("avgpool", std::make_shared<nn::AdaptiveAvgPool2d>(1));
  fc = register_module("fc", std::make_shared<nn::Linear>(512 * expansion, num_classes));

  // torchvision's initialisation: He-normal (fan_out) convolutions, BN weight 1 / bias 0.
  // Walks the children's trees: this object is not owned by a shared_ptr until the
  // constructor returns, so this->named_modules() (which lists itself through
  // shared_from_this) would throw std::bad_weak_ptr here.
  for (const auto& [child_name, child] : named_children()) {
    for (const auto& [name, module] : child->named_modules()) {
      if (auto c = std::dynamic_pointer_cast<nn::Conv2d>(module)) {
        nn::init::kaiming_normal_(c->weight, 0.0, "fan_out", "relu");
      } else if (auto bn = std::dynamic_pointer_cast<nn::BatchNorm2d>(module)) {
        nn::init::ones_(bn->weight);
        nn::init::zeros_(bn->bias);
      }
    }
  }
}

Tensor ResNet::forward(const Tensor& x) {
  Tensor h = stem_end(*bn1, *maxpool, conv1->forward(x));  // (N, 64, H/4, W/4)
  h = layer4->forward(layer3->forward(layer2->forward(layer1->forward(h))));
  return fc->forward(avgpool->forward(h).flatten(1));  // (N, num_classes)
}

std::shared_ptr<ResNet> resnet18(int64_t c) { return std::make_shared<ResNet>(false, std::vector<int64_t>{2, 2, 2, 2}, c); }
std::shared_ptr<ResNet> resnet34(int64_t c) { return std::make_shared<ResNet>(false, std::vector<int64_t>{3, 4, 6, 3}, c); }
std::shared_ptr<ResNet> resnet50(int64_t c) { return std::make_shared<ResNet>(true, std::vector<int64_t>{3, 4, 6, 3}, c); }
std::shared_ptr<ResNet> resnet101(int64_t c) { return std::make_shared<ResNet>(true, std::vector<int64_t>{3, 4, 23, 3}, c); }
std::shared_ptr<ResNet> resnet152(int64_t c) { return std::make_shared<ResNet>(true, std::vector<int64_t>{3, 8, 36, 3}, c); }

}  // namespace lockstep::models
