// nn/init.cpp — torch.nn.init's formulas, drawing from the default generator.
// Read before: nn/init.h.
#include "nn/init.h"

#include <cmath>

#include "core/factory.h"
#include "core/grad_mode.h"

namespace lockstep::nn::init {

namespace {
// Random values are drawn in the tensor's dtype when lockstep computes in it,
// else in float32 (f16/bf16 are storage types), then copied in place.
ScalarType draw_dtype(const Tensor& t, const char* op) {
  LS_CHECK(t.defined(), "nn::init::", op, ": the tensor is undefined");
  LS_CHECK(t.is_floating_point(), "nn::init::", op, ": needs a floating point tensor but got ",
           t.dtype(), " with shape ", t.shape_str());
  return t.dtype() == kFloat64 ? kFloat64 : kFloat32;
}

double fan(const Tensor& t, const std::string& mode, const char* op) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  LS_CHECK(mode == "fan_in" || mode == "fan_out", "nn::init::", op,
           ": mode must be \"fan_in\" or \"fan_out\" but got \"", mode, "\"");
  const int64_t f = mode == "fan_in" ? fan_in : fan_out;
  LS_CHECK(f > 0, "nn::init::", op, ": ", mode, " of a tensor with shape ", t.shape_str(),
           " is 0; cannot initialise an empty tensor this way");
  return static_cast<double>(f);
}
}  // namespace

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& tensor) {
  LS_CHECK(tensor.defined(), "nn::init::calculate_fan_in_and_fan_out: the tensor is undefined");
  LS_CHECK(tensor.dim() >= 2, "nn::init::calculate_fan_in_and_fan_out: fan in and fan out need a "
           "tensor with at least 2 dims but got shape ", tensor.shape_str());
  int64_t receptive_field = 1;
  for (int64_t d = 2; d < tensor.dim(); ++d) receptive_field *= tensor.size(d);
  return {tensor.size(1) * receptive_field, tensor.size(0) * receptive_field};
}

double calculate_gain(const std::string& nonlinearity, double param) {
  if (nonlinearity == "linear" || nonlinearity == "conv1d" || nonlinearity == "conv2d" ||
      nonlinearity == "conv3d" || nonlinearity == "sigmoid") {
    return 1.0;
  }
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nonlinearity == "selu") return 3.0 / 4.0;
  throw Error("nn::init::calculate_gain: unsupported nonlinearity \"" + nonlinearity +
              "\"; use linear, conv1d, conv2d, conv3d, sigmoid, tanh, relu, leaky_relu or selu");
}

Tensor uniform_(Tensor tensor, double low, double high) {
  const ScalarType dtype = draw_dtype(tensor, "uniform_");
  NoGradGuard no_grad;
  tensor.copy_(uniform(tensor.sizes(), low, high, TensorOptions().dtype(dtype)));
  return tensor;
}

Tensor normal_(Tensor tensor, double mean, double std) {
  const ScalarType dtype = draw_dtype(tensor, "normal_");
  LS_CHECK(std >= 0.0, "nn::init::normal_: std must be >= 0 but got ", std);
  NoGradGuard no_grad;
  Tensor draw = randn(tensor.sizes(), TensorOptions().dtype(dtype));
  if (std != 1.0) draw.mul_(std);
  if (mean != 0.0) draw.add_(mean);
  tensor.copy_(draw);
  return tensor;
}

Tensor constant_(Tensor tensor, double value) {
  LS_CHECK(tensor.defined(), "nn::init::constant_: the tensor is undefined");
  NoGradGuard no_grad;
  tensor.fill_(value);
  return tensor;
}

Tensor zeros_(Tensor tensor) { return constant_(std::move(tensor), 0.0); }
Tensor ones_(Tensor tensor) { return constant_(std::move(tensor), 1.0); }

Tensor xavier_uniform_(Tensor tensor, double gain) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
  const double std = gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
  const double bound = std::sqrt(3.0) * std;
  return uniform_(std::move(tensor), -bound, bound);
}

Tensor xavier_normal_(Tensor tensor, double gain) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
  const double std = gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
  return normal_(std::move(tensor), 0.0, std);
}

Tensor kaiming_uniform_(Tensor tensor, double a, const std::string& mode,
                        const std::string& nonlinearity) {
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(fan(tensor, mode, "kaiming_uniform_"));
  const double bound = std::sqrt(3.0) * std;
  return uniform_(std::move(tensor), -bound, bound);
}

Tensor kaiming_normal_(Tensor tensor, double a, const std::string& mode,
                       const std::string& nonlinearity) {
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(fan(tensor, mode, "kaiming_normal_"));
  return normal_(std::move(tensor), 0.0, std);
}

}  // namespace lockstep::nn::init
