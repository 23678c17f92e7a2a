// nn/rnn.h — the multi-layer recurrent layers LSTM and GRU, as torch.nn.LSTM /
// torch.nn.GRU and libtorch's spellings:
//
//   auto lstm = std::make_shared<ls::nn::LSTM>(
//       ls::nn::LSTMOptions(input_size, hidden).num_layers(2).batch_first(true).dropout(0.2));
//   auto [output, state] = lstm->forward(x);          // or forward(x, std::make_tuple(h0, c0))
//   auto [h_n, c_n] = state;
//   auto [out, h] = gru->forward(x, h0);              // GRU: one state tensor
//
// Shapes (L = num_layers, D = 2 if bidirectional else 1, H = hidden_size,
// T = time steps, B = batch):
//   input   (T, B, I), or (B, T, I) with batch_first, or unbatched (T, I)
//   h0, c0  (L*D, B, H), or (L*D, H) for an unbatched input; zeros when not given
//           (batch_first does not apply to the states, as in PyTorch)
//   output  (T, B, D*H) / (B, T, D*H) / (T, D*H): the last layer's h at every
//           step (bidirectional: [forward h_t, reverse h_t] joined)
//   h_n, c_n  (L*D, B, H) / (L*D, H): every layer's (and direction's) state after
//           its last step (row l*D + d; the reverse direction ends at t = 0)
// Layer l > 0 reads layer l-1's output, through dropout(p) while training (not
// after the last layer). The reverse direction runs the same recurrence from
// t = T-1 down to 0 with its own weights. Parameters, per layer l, in PyTorch's
// names and order: weight_ih_l{l} (G*H, I or D*H), weight_hh_l{l} (G*H, H),
// bias_ih_l{l}, bias_hh_l{l} (G*H), then the same with the suffix "_reverse";
// G = 4 for LSTM (gates i, f, g, o) and 3 for GRU (r, z, n), all drawn from
// U(-1/sqrt(H), 1/sqrt(H)). The step formulas are in nn/rnn_cell.h, and
// Note [Recurrent layers under autocast] there says what bf16 autocast does.
//
// Each layer is composed of recording ops (nn/rnn_composed.h: one GEMM for the
// input projection of all steps, then one GEMM and the gate arithmetic a step).
// An LSTM or GRU layer on the CPU (float32 / float64, no autocast) runs instead
// as one fused op (Note [Fused LSTM layer] in nn/lstm_layer.h, Note [Fused GRU
// layer] in nn/gru_layer.h); on a GPU, as one cuDNN call per layer for both
// directions (Note [cuDNN RNN layer] in autograd/functions/rnn_cudnn.h). The
// composition above stays their reference.
// Not supported: proj_size (PyTorch's option with no setter here).
// Read before: nn/rnn_cell.h. Read next: nn/transformer.h.
#pragma once

#include <optional>
#include <tuple>
#include <vector>

#include "autograd/functions/rnn_cudnn.h"
#include "nn/rnn_cell.h"

namespace lockstep::nn {

// The options LSTM and GRU share (libtorch's LSTMOptions / GRUOptions); each
// setter returns the options class `Self`, each getter has the setter's name.
template <class Self>
class RNNOptionsBase {
 public:
  RNNOptionsBase(int64_t input_size, int64_t hidden_size)
      : input_size_(input_size), hidden_size_(hidden_size) {}

  Self& num_layers(int64_t v) { num_layers_ = v; return self(); }
  Self& bias(bool v) { bias_ = v; return self(); }
  Self& batch_first(bool v) { batch_first_ = v; return self(); }
  Self& dropout(double v) { dropout_ = v; return self(); }
  Self& bidirectional(bool v) { bidirectional_ = v; return self(); }

  int64_t input_size() const { return input_size_; }
  int64_t hidden_size() const { return hidden_size_; }
  int64_t num_layers() const { return num_layers_; }
  bool bias() const { return bias_; }
  bool batch_first() const { return batch_first_; }
  double dropout() const { return dropout_; }
  bool bidirectional() const { return bidirectional_; }

 private:
  Self& self() { return static_cast<Self&>(*this); }
  int64_t input_size_, hidden_size_;
  int64_t num_layers_ = 1;
  bool bias_ = true, batch_first_ = false, bidirectional_ = false;
  double dropout_ = 0.0;
};

class LSTMOptions : public RNNOptionsBase<LSTMOptions> {
 public:
  using RNNOptionsBase::RNNOptionsBase;
};
class GRUOptions : public RNNOptionsBase<GRUOptions> {
 public:
  using RNNOptionsBase::RNNOptionsBase;
};

// What LSTM and GRU share: the per-layer weights and the layout of inputs and states.
class RNNBase : public Module {
 public:
  int64_t input_size() const { return input_size_; }
  int64_t hidden_size() const { return hidden_size_; }
  int64_t num_layers() const { return num_layers_; }
  int64_t num_directions() const { return directions_; }
  // The weights of layer l (the tensors registered as weight_ih_l{l}, ...; with
  // reverse, weight_ih_l{l}_reverse, ...).
  const RNNWeights& layer(int64_t l, bool reverse = false) const {
    return layers_.at(static_cast<size_t>(l * directions_ + (reverse ? 1 : 0)));
  }
  // Layer l's parameters, one entry per direction (for Note [cuDNN RNN layer]).
  std::vector<autograd::RnnLayerParams> layer_params(int64_t l) const;

 protected:
  // gates: 4 (LSTM) or 3 (GRU); name: "LSTM" or "GRU", for messages.
  template <class Options>
  RNNBase(const Options& o, int64_t gates, const char* name)
      : RNNBase(name, gates, o.input_size(), o.hidden_size(), o.num_layers(), o.bias(),
                o.batch_first(), o.dropout(), o.bidirectional()) {}

  // The input as (T, B, I), and whether it had a batch dim.
  struct Sequence {
    Tensor x;  // (T, B, I)
    bool batched;
  };
  Sequence to_time_major(const Tensor& input) const;
  // A given state (L*D, B, H) / (L*D, H) as (L*D, B, H) in the weights' dtype; zeros when undefined.
  Tensor state_or_zeros(const Tensor& state, const Sequence& seq, const char* what) const;
  // (T, B, D*H) output back in the input's layout; (L*D, B, H) states back too.
  Tensor output_layout(const Tensor& out, const Sequence& seq) const;
  Tensor state_layout(const Tensor& state, const Sequence& seq) const;
  // The input of layer l + 1 from layer l's directions' outputs (T, B, H) each: joined
  // along the last dim, then dropout while training, except after the last layer.
  Tensor between_layers(const std::vector<Tensor>& outs, int64_t l) const;

  const char* name_;
  int64_t input_size_, hidden_size_;
  int64_t num_layers_, directions_;
  bool batch_first_;
  double dropout_;
  std::vector<RNNWeights> layers_;  // layer l, direction d at l * directions_ + d

 private:
  RNNBase(const char* name, int64_t gates, int64_t input_size, int64_t hidden_size,
          int64_t num_layers, bool bias, bool batch_first, double dropout, bool bidirectional);
};

struct LSTM : RNNBase {
  explicit LSTM(const LSTMOptions& options) : RNNBase(options, 4, "LSTM"), options(options) {}
  LSTM(int64_t input_size, int64_t hidden_size) : LSTM(LSTMOptions(input_size, hidden_size)) {}

  std::string type_name() const override { return "LSTM"; }
  // Returns (output, (h_n, c_n)); hx = (h0, c0), zeros when absent.
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(
      const Tensor& input, const std::optional<std::tuple<Tensor, Tensor>>& hx = std::nullopt);

  LSTMOptions options;
};

struct GRU : RNNBase {
  explicit GRU(const GRUOptions& options) : RNNBase(options, 3, "GRU"), options(options) {}
  GRU(int64_t input_size, int64_t hidden_size) : GRU(GRUOptions(input_size, hidden_size)) {}

  std::string type_name() const override { return "GRU"; }
  // Returns (output, h_n); hx = h0, zeros when undefined.
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& hx = Tensor());

  GRUOptions options;
};

}  // namespace lockstep::nn
