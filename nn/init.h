// nn/init.h — parameter initialisation, as torch.nn.init does it.
//
// Each function fills a tensor in place (the handle shares the module's
// storage) under NoGradGuard, drawing from the default generator (core/rng.h),
// so manual_seed(s) before building a model gives the same weights on every
// run and every rank. Only floating tensors can be filled with random values.
//
// § Note [Kaiming init of Linear and Conv]
// PyTorch's Linear and ConvNd initialise their weight with
// kaiming_uniform_(w, a = sqrt(5)), i.e. U(-b, b) with
//   gain = sqrt(2 / (1 + a^2)) = sqrt(1/3),  b = gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in),
// and their bias with U(-1/sqrt(fan_in), 1/sqrt(fan_in)), where fan_in is
// weight.size(1) times the kernel area (see calculate_fan_in_and_fan_out).
// The a = sqrt(5) is a historical choice kept for parity; the function's own
// default is PyTorch's a = 0.
//
// Read before: core/rng.h, nn/module.h. Read next: nn/linear.h.
#pragma once

#include <string>
#include <utility>

#include "core/tensor.h"

namespace lockstep::nn::init {

// (fan_in, fan_out) of a weight with >= 2 dims: size(1) and size(0), each times
// the product of dims 2.. (the receptive field of a conv kernel).
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& tensor);

// The recommended gain for a nonlinearity: "linear", "conv1d", "conv2d",
// "sigmoid" -> 1; "tanh" -> 5/3; "relu" -> sqrt(2); "leaky_relu" -> sqrt(2 / (1 + param^2));
// "selu" -> 3/4.
double calculate_gain(const std::string& nonlinearity, double param = 0.01);

Tensor uniform_(Tensor tensor, double low = 0.0, double high = 1.0);  // U(low, high)
Tensor normal_(Tensor tensor, double mean = 0.0, double std = 1.0);  // N(mean, std^2)
Tensor constant_(Tensor tensor, double value);
Tensor zeros_(Tensor tensor);
Tensor ones_(Tensor tensor);

// U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(Tensor tensor, double gain = 1.0);
// N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(Tensor tensor, double gain = 1.0);

// U(-b, b), b = gain * sqrt(3 / fan), fan = fan_in ("fan_in") or fan_out
// ("fan_out"), gain = calculate_gain(nonlinearity, a). See Note [Kaiming init of Linear and Conv].
Tensor kaiming_uniform_(Tensor tensor, double a = 0.0, const std::string& mode = "fan_in",
                        const std::string& nonlinearity = "leaky_relu");
// N(0, std^2), std = gain / sqrt(fan).
Tensor kaiming_normal_(Tensor tensor, double a = 0.0, const std::string& mode = "fan_in",
                       const std::string& nonlinearity = "leaky_relu");

}  // namespace lockstep::nn::init
