// data/transforms.cpp — Normalize's arithmetic and the checks of every transform.
// Read before: data/transforms.h. Read next: data/mnist.cpp.
#include "data/transforms.h"

#include <cmath>

#include "core/error.h"
#include "core/factory.h"
#include "core/native/native.h"

namespace lockstep::data::transforms {

NormalizeTransform::NormalizeTransform(std::vector<double> mean, std::vector<double> stddev)
    : mean_(std::move(mean)), stddev_(std::move(stddev)) {
  LS_CHECK(!mean_.empty() && mean_.size() == stddev_.size(), "Normalize: got ", mean_.size(),
           " means and ", stddev_.size(),
           " standard deviations; give one of each for all channels, or one of each per channel");
  for (size_t c = 0; c < stddev_.size(); ++c) {
    LS_CHECK(std::isfinite(mean_[c]) && std::isfinite(stddev_[c]) && stddev_[c] != 0.0,
             "Normalize: channel ", c, " has mean ", mean_[c], " and stddev ", stddev_[c],
             "; both must be finite and the stddev non-zero (it divides)");
  }
}

Tensor NormalizeTransform::normalize(const Tensor& data, int64_t channel_dim) const {
  LS_CHECK(data.defined() && is_floating_point(data.dtype()), "Normalize: expects floating data but got ",
           data.defined() ? std::string(dtype_name(data.dtype())) : std::string("an undefined tensor"),
           "; convert it first (e.g. `.to(ls::kFloat32)` in the dataset's get(), or a TensorLambda)");
  const auto channels = static_cast<int64_t>(mean_.size());
  IntList shape;  // one mean: 0-d; else (C, 1, ..., 1) lined up with the data's channel dim
  if (channels > 1) {
    LS_CHECK(data.dim() > channel_dim && data.size(channel_dim) == channels, "Normalize: ",
             channels, " means (one per channel) but the data ", data.shape_str(), " has ",
             data.dim() > channel_dim ? std::to_string(data.size(channel_dim)) : std::string("no"),
             " channels at dim ", channel_dim, " (examples are (C, ...), batches (B, C, ...))");
    shape.assign(static_cast<size_t>(data.dim() - channel_dim), 1);
    shape[0] = channels;
  }
  const TensorOptions options = TensorOptions().dtype(data.dtype()).device(data.device());
  const Tensor mean = channels > 1 ? tensor<double>(mean_, shape, options)
                                   : scalar_tensor(mean_[0], options);
  const Tensor stddev = channels > 1 ? tensor<double>(stddev_, shape, options)
                                     : scalar_tensor(stddev_[0], options);
  return native::binary(native::BinaryOp::Div, native::binary(native::BinaryOp::Sub, data, mean),
                        stddev);
}

Example NormalizeTransform::apply(Example example) const {
  return {normalize(example.data, 0), std::move(example.target)};
}

Batch NormalizeTransform::apply_batch(Batch batch) const {
  return {normalize(batch.data, 1), std::move(batch.target)};
}

Lambda::Lambda(std::function<Example(Example)> fn) : fn_(std::move(fn)) {
  LS_CHECK(static_cast<bool>(fn_), "transforms::Lambda: the function is empty");
}

TensorLambda::TensorLambda(std::function<Tensor(Tensor)> fn) : fn_(std::move(fn)) {
  LS_CHECK(static_cast<bool>(fn_), "transforms::TensorLambda: the function is empty");
}

}  // namespace lockstep::data::transforms
