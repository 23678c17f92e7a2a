// tests/nn/test_parity.cpp — every layer and loss against PyTorch (1.13; the issue-41 cases 2.15).
//
// Each case loads tests/golden/<case>.safetensors (written by tools/make_golden.py),
// copies PyTorch's state_dict into the lockstep module with load_state_dict (so the
// parameter and buffer names must be PyTorch's), runs forward, then backward from
// (output * grad_output).sum(), and compares the output, the gradient of every
// floating input and parameter, and the buffers after the forward (BatchNorm's running
// statistics). Every case runs twice, in float32 and in float64, against PyTorch's
// float64 results: see Note [Golden references are float64] in the generator and
// Note [Parity tolerance] in tests/support/golden.h for the tolerances.
// Read before: tests/support/golden.h, tools/make_golden.py.
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/nn_ops.h"
#include "nn/nn.h"
#include "tests/support/golden.h"

namespace ls = lockstep;
using ls::testing::Golden;

namespace {

using Inputs = std::map<std::string, ls::Tensor>;
using Forward = std::function<ls::Tensor(const Inputs&)>;
using Names = std::vector<std::string>;

Names names_of(const ls::nn::NamedTensors& named) {
  Names out;
  for (const auto& [name, t] : named) out.push_back(name);
  return out;
}

// Runs golden case `file` through `module` (already built with the case's options and
// in the case's train/eval mode) in `dtype`; `forward` maps the inputs to the output.
void check_case(const std::string& file, ls::nn::Module& module, ls::ScalarType dtype,
                const Forward& forward) {
  INFO("golden case ", file, " in ", dtype == ls::kFloat64 ? "float64" : "float32");
  const Golden g = ls::testing::load_golden(file);
  const ls::testing::Tolerance tol = ls::testing::tolerance_for(dtype);

  // Same names, same order (DDP buckets in parameter order, see Note [Registration order]).
  CHECK(names_of(module.named_parameters()) == g.meta_list("param_order"));
  CHECK(names_of(module.named_buffers()) == g.meta_list("buffer_order"));
  module.to(dtype);
  REQUIRE_NOTHROW(module.load_state_dict(g.with_prefix("state.")));  // strict: names must match

  Inputs inputs;
  for (auto& [name, t] : g.with_prefix("input.")) {
    inputs[name] = t.is_floating_point() ? t.to(dtype).clone().requires_grad_(true) : t;
  }
  module.zero_grad();
  ls::Tensor out = forward(inputs);
  CHECK_GOLDEN(out, g.at("output"), tol, file + ": output");
  REQUIRE(out.sizes() == g.at("output").sizes());
  (out * g.at("grad_output").to(dtype)).sum().backward();

  for (const auto& [name, expected] : g.with_prefix("grad.input.")) {
    CHECK_GOLDEN(inputs.at(name).grad(), expected, tol, file + ": grad of input " + name);
  }
  for (const auto& [name, p] : module.named_parameters()) {
    REQUIRE_MESSAGE(g.has("grad.param." + name), file, ": PyTorch has no parameter named ", name);
    CHECK_GOLDEN(p.grad(), g.at("grad.param." + name), tol, file + ": grad of " + name);
  }
  const auto buffers = module.named_buffers();
  for (const auto& [name, expected] : g.with_prefix("state_after.")) {
    bool found = false;
    for (const auto& [bname, b] : buffers) {
      if (bname != name) continue;
      found = true;
      CHECK_GOLDEN(b, expected, tol, file + ": buffer " + name + " after forward");
    }
    CHECK_MESSAGE(found, file, ": lockstep has no buffer named ", name);
  }
}

Forward unary(ls::nn::UnaryModule& m, const char* input = "x") {
  return [&m, input](const Inputs& in) { return m.forward(in.at(input)); };
}

const ls::ScalarType kDtypes[] = {ls::kFloat32, ls::kFloat64};

}  // namespace

TEST_CASE("parity: Linear on 2-d and 3-d input, with and without bias") {
  for (ls::ScalarType dtype : kDtypes) {
    ls::nn::Linear a(7, 4), b(7, 4), c(7, 4, /*bias=*/false);
    check_case("nn_linear_2d", a, dtype, unary(a));
    check_case("nn_linear_3d", b, dtype, unary(b));
    check_case("nn_linear_nobias", c, dtype, unary(c));
  }
}

TEST_CASE("parity: Conv2d with stride 2, padding 1, dilation 2, groups 2") {
  for (ls::ScalarType dtype : kDtypes) {
    auto options = ls::nn::Conv2dOptions(4, 6, 3).stride(2).padding(1).dilation(2).groups(2);
    ls::nn::Conv2d with_bias(options);
    ls::nn::Conv2d without_bias(ls::nn::Conv2dOptions(options).bias(false));
    check_case("nn_conv2d", with_bias, dtype, unary(with_bias));
    check_case("nn_conv2d_nobias", without_bias, dtype, unary(without_bias));
  }
}

TEST_CASE("parity: Conv2d with a rectangular kernel, stride and padding") {
  for (ls::ScalarType dtype : kDtypes) {
    ls::nn::Conv2d conv(ls::nn::Conv2dOptions(3, 5, {3, 2}).stride({1, 2}).padding({1, 0}));
    check_case("nn_conv2d_rect", conv, dtype, unary(conv));
  }
}

TEST_CASE("parity: BatchNorm2d in train mode updates the running statistics as PyTorch") {
  for (ls::ScalarType dtype : kDtypes) {
    ls::nn::BatchNorm2d bn(3);
    bn.train();
    check_case("nn_batch_norm2d_train", bn, dtype, unary(bn));
  }
}

TEST_CASE("parity: BatchNorm2d in eval mode uses the running statistics") {
  for (ls::ScalarType dtype : kDtypes) {
    ls::nn::BatchNorm2d bn(3);
    bn.eval();
    check_case("nn_batch_norm2d_eval", bn, dtype, unary(bn));
  }
}

TEST_CASE("parity: LayerNorm over one and two trailing dims") {
  for (ls::ScalarType dtype : kDtypes) {
    ls::nn::LayerNorm one(8), two(ls::IntList{4, 8});
    check_case("nn_layer_norm", one, dtype, unary(one));
    check_case("nn_layer_norm_2d", two, dtype, unary(two));
  }
}

TEST_CASE("parity: Embedding with padding_idx returns the padding row and gives it no gradient") {
  for (ls::ScalarType dtype : kDtypes) {
    ls::nn::Embedding emb(10, 6, /*padding_idx=*/2);
    check_case("nn_embedding", emb, dtype, unary(emb, "ids"));
  }
}

TEST_CASE("parity: GELU, ReLU and Flatten") {
  for (ls::ScalarType dtype : kDtypes) {
    ls::nn::GELU gelu;
    ls::nn::ReLU relu;
    ls::nn::Flatten flatten;
    check_case("nn_gelu", gelu, dtype, unary(gelu));
    check_case("nn_relu", relu, dtype, unary(relu));
    check_case("nn_flatten", flatten, dtype, unary(flatten));
  }
}

TEST_CASE("parity: MaxPool2d(3, stride 2, padding 1)") {
  for (ls::ScalarType dtype : kDtypes) {
    ls::nn::MaxPool2d pool(3, 2, 1);
    check_case("nn_max_pool2d", pool, dtype, unary(pool));
  }
}

TEST_CASE("parity: AdaptiveAvgPool2d with uneven windows and to 1x1") {
  for (ls::ScalarType dtype : kDtypes) {
    ls::nn::AdaptiveAvgPool2d uneven({3, 2}), global(1);
    check_case("nn_adaptive_avg_pool2d", uneven, dtype, unary(uneven));
    check_case("nn_adaptive_avg_pool2d_1", global, dtype, unary(global));
  }
}

TEST_CASE("parity: MultiheadAttention with and without a key_padding_mask") {
  for (ls::ScalarType dtype : kDtypes) {
    ls::nn::MultiheadAttention masked(8, 2), plain(8, 2);
    check_case("nn_multihead_attention", masked, dtype, [&](const Inputs& in) {
      return masked.forward(in.at("x"), in.at("key_padding_mask"));
    });
    check_case("nn_multihead_attention_nomask", plain, dtype,
               [&](const Inputs& in) { return plain.forward(in.at("x")); });
  }
}

TEST_CASE("parity: TransformerEncoderLayer (post-norm, gelu) with a key_padding_mask") {
  for (ls::ScalarType dtype : kDtypes) {
    ls::nn::TransformerEncoderLayer layer(8, 2, 16, /*dropout=*/0.0, "gelu", /*layer_norm_eps=*/1e-5);
    check_case("nn_transformer_encoder_layer", layer, dtype, [&](const Inputs& in) {
      return layer.forward(in.at("x"), in.at("key_padding_mask"));
    });
  }
}

TEST_CASE("parity: cross_entropy with the default and a custom ignore_index") {
  for (ls::ScalarType dtype : kDtypes) {
    ls::nn::Module none;  // a loss has no parameters
    check_case("loss_cross_entropy", none, dtype, [](const Inputs& in) {
      return ls::nn::functional::cross_entropy(in.at("logits"), in.at("target"));
    });
    check_case("loss_cross_entropy_ignore_index", none, dtype, [](const Inputs& in) {
      return ls::nn::functional::cross_entropy(in.at("logits"), in.at("target"), /*ignore_index=*/3);
    });
  }
}

TEST_CASE("parity: mse_loss differentiates both input and target") {
  for (ls::ScalarType dtype : kDtypes) {
    ls::nn::Module none;
    check_case("loss_mse", none, dtype, [](const Inputs& in) {
      return ls::nn::functional::mse_loss(in.at("input"), in.at("target"));
    });
  }
}

TEST_CASE("parity: GroupNorm, ConvTranspose2d and LeakyReLU") {
  for (ls::ScalarType dtype : kDtypes) {
    ls::nn::GroupNorm gn(2, 4);
    check_case("nn_group_norm", gn, dtype, [&](const Inputs& in) { return gn.forward(in.at("x")); });
    ls::nn::ConvTranspose2d up(
        ls::nn::ConvTranspose2dOptions(4, 6, 3).stride(2).padding(1).output_padding(1).groups(2));
    check_case("nn_conv_transpose2d", up, dtype, [&](const Inputs& in) { return up.forward(in.at("x")); });
    ls::nn::LeakyReLU leaky(0.1);
    check_case("nn_leaky_relu", leaky, dtype, [&](const Inputs& in) { return leaky.forward(in.at("x")); });
  }
}

TEST_CASE("parity: nll_loss, binary_cross_entropy(_with_logits), smooth_l1_loss with reductions") {
  namespace F = ls::nn::functional;
  for (ls::ScalarType dtype : kDtypes) {
    ls::nn::Module none;
    check_case("loss_nll", none, dtype, [](const Inputs& in) {
      return F::nll_loss(in.at("log_probs"), in.at("target"));
    });
    check_case("loss_binary_cross_entropy", none, dtype, [](const Inputs& in) {
      return F::binary_cross_entropy(in.at("input"), in.at("target"), ls::kSum);
    });
    check_case("loss_binary_cross_entropy_with_logits", none, dtype, [](const Inputs& in) {
      return F::binary_cross_entropy_with_logits(in.at("input"), in.at("target"));
    });
    check_case("loss_smooth_l1", none, dtype, [](const Inputs& in) {
      return F::smooth_l1_loss(in.at("input"), in.at("target"), ls::kNone, 0.5);
    });
  }
}

namespace {
// Tensors flattened and joined, as tools/make_golden.py joins a recurrent layer's results.
ls::Tensor flat(const std::vector<ls::Tensor>& ts) {
  std::vector<ls::Tensor> parts;
  for (const auto& t : ts) parts.push_back(t.reshape({-1}));
  return ls::cat(parts, 0);
}
}  // namespace

TEST_CASE("parity: LSTM and GRU (2 layers, batch_first, with and without states and bias)") {
  for (ls::ScalarType dtype : kDtypes) {
    ls::nn::LSTM lstm(ls::nn::LSTMOptions(5, 6).num_layers(2).batch_first(true));
    check_case("nn_lstm", lstm, dtype, [&](const Inputs& in) {
      auto [out, state] = lstm.forward(in.at("x"), std::make_tuple(in.at("h0"), in.at("c0")));
      return flat({out, std::get<0>(state), std::get<1>(state)});
    });
    ls::nn::LSTM plain(ls::nn::LSTMOptions(5, 6).bias(false));
    check_case("nn_lstm_nobias_nohx", plain, dtype, [&](const Inputs& in) {
      auto [out, state] = plain.forward(in.at("x"));
      return flat({out, std::get<0>(state), std::get<1>(state)});
    });
    ls::nn::GRU gru(ls::nn::GRUOptions(5, 6).num_layers(2).batch_first(true));
    check_case("nn_gru", gru, dtype, [&](const Inputs& in) {
      auto [out, h] = gru.forward(in.at("x"), in.at("h0"));
      return flat({out, h});
    });
  }
}

TEST_CASE("parity: bidirectional LSTM (2 layers, with states) and GRU (batch_first, no state)") {
  for (ls::ScalarType dtype : kDtypes) {
    ls::nn::LSTM lstm(ls::nn::LSTMOptions(5, 6).num_layers(2).bidirectional(true));
    check_case("nn_lstm_bidirectional", lstm, dtype, [&](const Inputs& in) {
      auto [out, state] = lstm.forward(in.at("x"), std::make_tuple(in.at("h0"), in.at("c0")));
      return flat({out, std::get<0>(state), std::get<1>(state)});
    });
    ls::nn::GRU gru(ls::nn::GRUOptions(5, 6).batch_first(true).bidirectional(true));
    check_case("nn_gru_bidirectional", gru, dtype, [&](const Inputs& in) {
      auto [out, h] = gru.forward(in.at("x"));
      return flat({out, h});
    });
  }
}

TEST_CASE("parity: LSTMCell and GRUCell") {
  for (ls::ScalarType dtype : kDtypes) {
    ls::nn::LSTMCell lstm(5, 6);
    check_case("nn_lstm_cell", lstm, dtype, [&](const Inputs& in) {
      auto [h, c] = lstm.forward(in.at("x"), std::make_tuple(in.at("h"), in.at("c")));
      return flat({h, c});
    });
    ls::nn::GRUCell gru(5, 6);
    check_case("nn_gru_cell", gru, dtype, [&](const Inputs& in) { return gru.forward(in.at("x"), in.at("h")); });
  }
}

TEST_CASE("parity: TransformerEncoder (2 pre-norm relu layers, final norm, time-major, causal)") {
  for (ls::ScalarType dtype : kDtypes) {
    auto layer = ls::nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0).norm_first(true);
    auto options = ls::nn::TransformerEncoderOptions(layer, 2).norm(std::make_shared<ls::nn::LayerNorm>(8));
    ls::nn::TransformerEncoder positional(options);
    check_case("nn_transformer_encoder", positional, dtype,
               [&](const Inputs& in) { return positional.forward(in.at("x"), in.at("mask")); });
    ls::nn::TransformerEncoder causal(
        ls::nn::TransformerEncoderOptions(layer, 2).norm(std::make_shared<ls::nn::LayerNorm>(8)));
    check_case("nn_transformer_encoder", causal, dtype, [&](const Inputs& in) {
      return causal.forward(in.at("x"), ls::nn::AttentionMasks().is_causal(true));
    });
  }
}
