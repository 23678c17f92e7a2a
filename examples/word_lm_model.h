// examples/word_lm_model.h — the network of the word-level language model
// (examples/word_language_model.cpp), as RNNModel in model.py of pytorch/examples'
// word_language_model:
//
//   words (T, B) int64 -> Embedding(ntoken, ninp) -> Dropout -> LSTM or GRU
//   (nlayers, nhid, dropout between layers) -> Dropout -> Linear(nhid, ntoken)
//   -> log_softmax: log-probabilities (T * B, ntoken), for nll_loss.
//
// With `tied`, the decoder's weight is the embedding's (Press & Wolf 2016,
// "Using the Output Embedding to Improve Language Models"; Inan et al. 2016):
// one tensor registered in both modules, listed once by parameters() (Note
// [Shared parameters] in nn/module.h); it needs nhid == ninp. init_weights draws
// the embedding and the decoder's weight from U(-0.1, 0.1) and zeroes the
// decoder's bias, as the original does; the recurrent layer keeps its own
// U(-1/sqrt(nhid), 1/sqrt(nhid)).
// Not ported: the original's RNN_TANH / RNN_RELU cells and TransformerModel.
// Read before: examples/word_corpus.h, nn/rnn.h. Read next: examples/word_language_model.cpp.
#pragma once

#include <lockstep.h>

#include <memory>
#include <string>
#include <tuple>

namespace examples {

// The recurrent state carried from one batch to the next: h (nlayers, B, nhid),
// and for an LSTM also its cell state c (undefined for a GRU).
struct Hidden {
  lockstep::Tensor h, c;

  // The same values cut from the graph that made them (repackage_hidden in the
  // original): backward then stops at the start of the batch (truncated BPTT).
  Hidden detach() const { return {h.detach(), c.defined() ? c.detach() : c}; }
};

struct RNNModel : lockstep::nn::Module {
  // rnn_type "LSTM" or "GRU".
  RNNModel(const std::string& rnn_type, int64_t ntoken, int64_t ninp, int64_t nhid, int64_t nlayers,
           double dropout = 0.5, bool tie_weights = false)
      : rnn_type(rnn_type), ntoken(ntoken), nhid(nhid), nlayers(nlayers) {
    namespace nn = lockstep::nn;
    LS_CHECK(rnn_type == "LSTM" || rnn_type == "GRU", "RNNModel: rnn_type must be LSTM or GRU but got '",
             rnn_type, "' (the original's RNN_TANH, RNN_RELU and Transformer are not ported)");
    drop = register_module("drop", std::make_shared<nn::Dropout>(dropout));
    encoder = register_module("encoder", std::make_shared<nn::Embedding>(ntoken, ninp));
    if (rnn_type == "LSTM") {
      lstm = register_module("rnn", std::make_shared<nn::LSTM>(
                                        nn::LSTMOptions(ninp, nhid).num_layers(nlayers).dropout(dropout)));
    } else {
      gru = register_module("rnn", std::make_shared<nn::GRU>(
                                       nn::GRUOptions(ninp, nhid).num_layers(nlayers).dropout(dropout)));
    }
    decoder = register_module("decoder", std::make_shared<nn::Linear>(nhid, ntoken));
    if (tie_weights) {
      LS_CHECK(nhid == ninp, "RNNModel: when using the tied flag, nhid (", nhid,
               ") must be equal to emsize (", ninp, ")");
      decoder->weight = decoder->replace_parameter("weight", encoder->weight);
    }
    init_weights();
  }

  void init_weights() {
    namespace init = lockstep::nn::init;
    const double initrange = 0.1;
    init::uniform_(encoder->weight, -initrange, initrange);
    init::zeros_(decoder->bias);
    init::uniform_(decoder->weight, -initrange, initrange);
  }

  // input (T, B) int64 -> (log-probabilities (T * B, ntoken), the state after step T)
  std::tuple<lockstep::Tensor, Hidden> forward(const lockstep::Tensor& input, const Hidden& hidden) {
    const lockstep::Tensor emb = drop->forward(encoder->forward(input));  // (T, B, ninp)
    lockstep::Tensor output;                                              // (T, B, nhid)
    Hidden next;
    if (lstm) {
      std::tuple<lockstep::Tensor, lockstep::Tensor> state;
      std::tie(output, state) = lstm->forward(emb, std::make_tuple(hidden.h, hidden.c));
      std::tie(next.h, next.c) = state;
    } else {
      std::tie(output, next.h) = gru->forward(emb, hidden.h);
    }
    output = drop->forward(output);
    lockstep::Tensor decoded = decoder->forward(output);  // (T, B, ntoken)
    decoded = decoded.view({-1, ntoken});
    return {lockstep::log_softmax(decoded, /*dim=*/1), next};
  }

  // Zeros, for the first batch of an epoch: (nlayers, bsz, nhid) each.
  Hidden init_hidden(int64_t bsz) const {
    const lockstep::Tensor& weight = encoder->weight;
    Hidden h{weight.new_zeros({nlayers, bsz, nhid}), {}};
    if (lstm) h.c = weight.new_zeros({nlayers, bsz, nhid});
    return h;
  }

  std::string rnn_type;
  int64_t ntoken, nhid, nlayers;
  std::shared_ptr<lockstep::nn::Dropout> drop;
  std::shared_ptr<lockstep::nn::Embedding> encoder;
  std::shared_ptr<lockstep::nn::LSTM> lstm;  // one of lstm and gru, registered as "rnn"
  std::shared_ptr<lockstep::nn::GRU> gru;
  std::shared_ptr<lockstep::nn::Linear> decoder;
};

}  // namespace examples
