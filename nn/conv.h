// nn/conv.h — Conv2d and its options.
//
//   auto conv = std::make_shared<ls::nn::Conv2d>(
//       ls::nn::Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false));
//
// weight (out, in / groups, kH, kW) and bias (out), PyTorch's names, order and
// initialisation (see Note [Kaiming init of Linear and Conv] in nn/init.h).
// Input (N, C_in, H, W) -> (N, C_out, H', W') with
// H' = (H + 2 * padding - dilation * (kH - 1) - 1) / stride + 1.
// Read before: nn/linear.h, nn/expanding_array.h. Read next: nn/batch_norm.h.
#pragma once

#include "nn/expanding_array.h"
#include "nn/unary_module.h"

namespace lockstep::nn {

// Fluent options like libtorch's: each setter returns *this, each getter has the
// setter's name without arguments. The fields Conv2d and ConvTranspose2d share
// live in ConvOptionsBase; `Self` is the options class, so a chain of setters
// keeps its type (ConvTranspose2dOptions(...).stride(2).output_padding(1)).
// The values: getters only.
class ConvOptionsValues {
 public:
  ConvOptionsValues(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}

  int64_t in_channels() const { return in_channels_; }
  int64_t out_channels() const { return out_channels_; }
  const IntList& kernel_size() const { return kernel_size_.values(); }
  const IntList& stride() const { return stride_.values(); }
  const IntList& padding() const { return padding_.values(); }
  const IntList& dilation() const { return dilation_.values(); }
  int64_t groups() const { return groups_; }
  bool bias() const { return bias_; }

 protected:
  int64_t in_channels_, out_channels_;
  ExpandingArray<2> kernel_size_;
  ExpandingArray<2> stride_ = 1;
  ExpandingArray<2> padding_ = 0;
  ExpandingArray<2> dilation_ = 1;
  int64_t groups_ = 1;
  bool bias_ = true;
};

// The setters, returning the options class `Self`.
template <class Self>
class ConvOptionsBase : public ConvOptionsValues {
 public:
  using ConvOptionsValues::ConvOptionsValues;
  using ConvOptionsValues::bias;
  using ConvOptionsValues::dilation;
  using ConvOptionsValues::groups;
  using ConvOptionsValues::padding;
  using ConvOptionsValues::stride;

  Self& stride(ExpandingArray<2> v) { stride_ = v; return self(); }
  Self& padding(ExpandingArray<2> v) { padding_ = v; return self(); }
  Self& dilation(ExpandingArray<2> v) { dilation_ = v; return self(); }
  Self& groups(int64_t v) { groups_ = v; return self(); }
  Self& bias(bool v) { bias_ = v; return self(); }

 private:
  Self& self() { return static_cast<Self&>(*this); }
};

class Conv2dOptions : public ConvOptionsBase<Conv2dOptions> {
 public:
  using ConvOptionsBase::ConvOptionsBase;
};

namespace detail {
// The checks and PyTorch's initialisation both convolution layers share
// (`name` in messages): registers weight of `weight_shape` and, when
// options.bias(), bias (out). See Note [Kaiming init of Linear and Conv] in nn/init.h.
void init_conv_parameters(Module& m, const char* name, const ConvOptionsValues& options,
                          const IntList& weight_shape, Tensor& weight, Tensor& bias);
}  // namespace detail

struct Conv2d : UnaryModule {
  explicit Conv2d(const Conv2dOptions& options);

  std::string type_name() const override { return "Conv2d"; }
  bool runs_forward_pre_hooks() const override { return true; }  // Note [Forward pre-hooks]
  LS_NOT_A_HOLDER(Conv2d)
  Tensor forward(const Tensor& input) override;  // (N, C_in, H, W) -> (N, C_out, H', W')

  Conv2dOptions options;
  Tensor weight;  // (C_out, C_in / groups, kH, kW)
  Tensor bias;    // (C_out), undefined with .bias(false)
};

}  // namespace lockstep::nn
