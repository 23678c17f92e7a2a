// nn/conv_transpose.h — ConvTranspose2d and its options (torch.nn.ConvTranspose2d).
//
//   auto up = std::make_shared<ls::nn::ConvTranspose2d>(
//       ls::nn::ConvTranspose2dOptions(64, 32, 4).stride(2).padding(1).bias(false));
//
// weight (in, out / groups, kH, kW) and bias (out), PyTorch's names, layout and
// initialisation (kaiming_uniform_(a = sqrt(5)) with fan_in taken from the
// weight's dim 1, as PyTorch computes it). Input (N, C_in, H, W) ->
// (N, C_out, H', W'), H' = (H - 1) stride - 2 padding + dilation (kH - 1) +
// output_padding + 1. The op is core/conv_transpose.h's.
// Read before: nn/conv.h, core/conv_transpose.h. Read next: nn/group_norm.h.
#pragma once

#include "nn/conv.h"

namespace lockstep::nn {

// Conv2d's options (nn/conv.h) and output_padding.
class ConvTranspose2dOptions : public ConvOptionsBase<ConvTranspose2dOptions> {
 public:
  using ConvOptionsBase::ConvOptionsBase;

  ConvTranspose2dOptions& output_padding(ExpandingArray<2> v) { output_padding_ = v; return *this; }
  const IntList& output_padding() const { return output_padding_.values(); }

 private:
  ExpandingArray<2> output_padding_ = 0;
};

struct ConvTranspose2d : UnaryModule {
  explicit ConvTranspose2d(const ConvTranspose2dOptions& options);

  std::string type_name() const override { return "ConvTranspose2d"; }
  bool runs_forward_pre_hooks() const override { return true; }  // Note [Forward pre-hooks]
  LS_NOT_A_HOLDER(ConvTranspose2d)
  Tensor forward(const Tensor& input) override;  // (N, C_in, H, W) -> (N, C_out, H', W')

  ConvTranspose2dOptions options;
  Tensor weight;  // (C_in, C_out / groups, kH, kW)
  Tensor bias;    // (C_out), undefined with .bias(false)
};

}  // namespace lockstep::nn
