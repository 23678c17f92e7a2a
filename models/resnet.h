// models/resnet.h — ResNet 18/34/50/101/152 with torchvision's layout.
//
// Same module names, parameter names/shapes and initialisation as
// torchvision.models.resnetXX(weights=None): conv1, bn1, relu, maxpool,
// layer1..layer4 (blocks "0", "1", ... each with conv1/bn1/conv2/bn2[/conv3/bn3]
// and an optional downsample = Sequential(conv 1x1, bn)), avgpool, fc.
// Bottleneck puts the stride on the 3x3 convolution (ResNet v1.5), as torchvision.
// Input (N, 3, H, W) -> logits (N, num_classes).
// Read before: nn/conv.h, nn/batch_norm.h, nn/sequential.h. Read next: models/bert.h.
#pragma once

#include <memory>
#include <vector>

#include "nn/nn.h"

namespace lockstep::models {

// conv3x3-conv3x3 residual block (ResNet 18/34); expansion 1.
struct BasicBlock : nn::UnaryModule {
  static constexpr int64_t kExpansion = 1;
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride);
  std::string type_name() const override { return "BasicBlock"; }
  Tensor forward(const Tensor& x) override;  // (N, in, H, W) -> (N, planes, H/s, W/s)

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::Sequential> downsample;  // null when the shapes already match
};

// 1x1 - 3x3 (stride) - 1x1 residual block (ResNet 50/101/152); expansion 4.
struct Bottleneck : nn::UnaryModule {
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in_planes, int64_t planes, int64_t stride);
  std::string type_name() const override { return "Bottleneck"; }
  Tensor forward(const Tensor& x) override;  // (N, in, H, W) -> (N, 4 * planes, H/s, W/s)

  std::shared_ptr<nn::Conv2d> conv1, conv2, conv3;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2, bn3;
  std::shared_ptr<nn::Sequential> downsample;
};

struct ResNet : nn::UnaryModule {
  // bottleneck: Bottleneck blocks (50+) or BasicBlock (18/34); layers: blocks per stage.
  ResNet(bool bottleneck, const std::vector<int64_t>& layers, int64_t num_classes = 1000);
  std::string type_name() const override { return "ResNet"; }
  Tensor forward(const Tensor& x) override;  // (N, 3, H, W) -> (N, num_classes)

  std::shared_ptr<nn::Conv2d> conv1;
  std::shared_ptr<nn::BatchNorm2d> bn1;
  std::shared_ptr<nn::MaxPool2d> maxpool;
  std::shared_ptr<nn::Sequential> layer1, layer2, layer3, layer4;
  std::shared_ptr<nn::AdaptiveAvgPool2d> avgpool;
  std::shared_ptr<nn::Linear> fc;
};

std::shared_ptr<ResNet> resnet18(int64_t num_classes = 1000);
std::shared_ptr<ResNet> resnet34(int64_t num_classes = 1000);
std::shared_ptr<ResNet> resnet50(int64_t num_classes = 1000);
std::shared_ptr<ResNet> resnet101(int64_t num_classes = 1000);
std::shared_ptr<ResNet> resnet152(int64_t num_classes = 1000);

}  // namespace lockstep::models
