// examples/word_language_model.cpp — a port of pytorch/examples'
// word_language_model/main.py (the Python word-level language model) to
// lockstep, written for lockstep's API: the same model, data layout, training
// loop and printout.
//
// The model (examples/word_lm_model.h): Embedding -> dropout -> a 2-layer LSTM
// (or GRU) -> dropout -> Linear decoder -> log_softmax, optionally with the
// decoder tied to the embedding (--tied). The corpus (examples/word_corpus.h) is
// one stream of word indices per split, cut into --batch-size columns; training
// walks it --bptt steps at a time (truncated backpropagation through time: the
// LSTM's state carries over from batch to batch, detached so that backward stops
// at the batch's start), with nll_loss, gradients clipped to total norm --clip
// and plain SGD written out by hand; after every epoch the validation loss
// decides: the best model so far is saved (--save), otherwise the learning rate
// is divided by 4. At the end the best model is reloaded and tested.
//   build/bin/word_language_model --data ./data/wikitext-2 --epochs 6
//   build/bin/word_language_model --data ./data/wikitext-2 --epochs 6 --tied
//   tools/make_word_corpus.py /tmp/corpus && build/bin/word_language_model --data /tmp/corpus
// Differences from the original: the RNN_TANH / RNN_RELU / Transformer models
// and --use-optimizer, --onnx-export and generate.py are not ported; the model
// is saved as safetensors (the original pickles it with torch.save); Ctrl-C
// ends the program (the original catches it and tests the model so far); each
// epoch also prints a line "epoch E valid_loss L lr R cpu_seconds C seconds S"
// and the run ends with a "final" line, for scripts (bench/compare_examples.sh).
// Read before: examples/word_corpus.h, examples/word_lm_model.h. Read next: examples/dcgan.cpp.
#include <lockstep.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <string>

#include "examples/word_corpus.h"
#include "examples/word_lm_model.h"
#include "tools/cli.h"

namespace ls = lockstep;

namespace {

struct Options {
  std::string data = "./data/wikitext-2";
  std::string model = "LSTM";
  int64_t emsize = 200;
  int64_t nhid = 200;
  int64_t nlayers = 2;
  double lr = 20;
  double clip = 0.25;
  int64_t epochs = 40;
  int64_t batch_size = 20;
  int64_t bptt = 35;
  double dropout = 0.2;
  bool tied = false;
  int64_t seed = 1111;
  int64_t log_interval = 200;
  std::string save = "model.safetensors";
  bool dry_run = false;
  bool accel = false;
  int64_t threads = 1;
};

constexpr int64_t kEvalBatchSize = 10;

// Starting from sequential data, batchify arranges the dataset into columns.
// With the alphabet as the sequence and batch size 4 we'd get
//   a g m s
//   b h n t
//   c i o u
//   d j p v
//   e k q w
//   f l r x
// The columns are independent to the model: 'g' cannot be learned from 'f',
// but the batch runs in parallel. data (N) -> (N / bsz, bsz); the remainder is trimmed.
ls::Tensor batchify(const ls::Tensor& data, int64_t bsz, ls::Device device, const char* split) {
  const int64_t nbatch = data.size(0) / bsz;
  LS_CHECK(nbatch >= 2, "the ", split, " split has ", data.size(0), " words: too few for batches of ",
           bsz, " columns of at least 2 words; give a larger corpus or a smaller batch size");
  return data.narrow(0, 0, nbatch * bsz).view({bsz, -1}).t().contiguous().to(device);
}

// Rows i .. i + seq_len of `source` (seq_len = min(bptt, rows left - 1)) and, as
// the target, the same rows shifted by one, flattened:
//   data (seq_len, B), target (seq_len * B).
// With bptt 2 and the columns above, i = 0 gives data [a g m s; b h n t] and
// target [b h n t c i o u]. The chunks run along dim 0, the LSTM's time.
std::tuple<ls::Tensor, ls::Tensor> get_batch(const ls::Tensor& source, int64_t i, int64_t bptt) {
  const int64_t seq_len = std::min(bptt, source.size(0) - 1 - i);
  ls::Tensor data = source.narrow(0, i, seq_len);
  ls::Tensor target = source.narrow(0, i + 1, seq_len).view({-1});
  return {data, target};
}

using examples::Hidden;
using examples::RNNModel;

// The mean loss per word over `source`, one stream of kEvalBatchSize columns.
double evaluate(RNNModel& model, const ls::Tensor& source, const Options& o) {
  model.eval();  // no dropout
  ls::NoGradGuard no_grad;
  double total_loss = 0;
  Hidden hidden = model.init_hidden(kEvalBatchSize);
  for (int64_t i = 0; i < source.size(0) - 1; i += o.bptt) {
    auto [data, targets] = get_batch(source, i, o.bptt);
    ls::Tensor output;
    std::tie(output, hidden) = model.forward(data, hidden);
    total_loss += static_cast<double>(data.size(0)) * ls::nll_loss(output, targets).item<double>();
  }
  return total_loss / static_cast<double>(source.size(0) - 1);
}

void train(int64_t epoch, RNNModel& model, const ls::Tensor& train_data, double lr, const Options& o) {
  model.train();  // dropout on
  double total_loss = 0;
  auto start_time = std::chrono::steady_clock::now();
  Hidden hidden = model.init_hidden(o.batch_size);
  for (int64_t batch = 0, i = 0; i < train_data.size(0) - 1; ++batch, i += o.bptt) {
    auto [data, targets] = get_batch(train_data, i, o.bptt);
    // Starting each batch, we detach the hidden state from how it was previously
    // produced. If we didn't, the model would backpropagate to the start of the data.
    hidden = hidden.detach();
    model.zero_grad();
    ls::Tensor output;
    std::tie(output, hidden) = model.forward(data, hidden);
    ls::Tensor loss = ls::nll_loss(output, targets);
    loss.backward();

    // clip_grad_norm_ helps prevent the exploding gradient problem in RNNs / LSTMs.
    ls::nn::utils::clip_grad_norm_(model.parameters(), o.clip);
    {
      ls::NoGradGuard no_grad;
      for (auto& p : model.parameters()) p.add_(p.grad(), -lr);  // p.data.add_(p.grad, alpha=-lr)
    }

    const double batch_loss = loss.item<double>();
    LS_CHECK(std::isfinite(batch_loss), "the loss is not finite at epoch ", epoch, " batch ", batch,
             "; lower --lr or --clip");
    total_loss += batch_loss;
    if (batch % o.log_interval == 0 && batch > 0) {
      const double cur_loss = total_loss / static_cast<double>(o.log_interval);
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
      std::printf("| epoch %3lld | %5lld/%5lld batches | lr %02.2f | ms/batch %5.2f | loss %5.2f | ppl %8.2f\n",
                  static_cast<long long>(epoch), static_cast<long long>(batch),
                  static_cast<long long>(train_data.size(0) / o.bptt), lr,
                  elapsed * 1000 / static_cast<double>(o.log_interval), cur_loss, std::exp(cur_loss));
      std::fflush(stdout);
      total_loss = 0;
      start_time = std::chrono::steady_clock::now();
    }
    if (o.dry_run) break;
  }
}

int run(const Options& o) {
  ls::set_num_threads(static_cast<int>(o.threads));
  // Set the random seed manually for reproducibility.
  ls::manual_seed(static_cast<uint64_t>(o.seed));
  const ls::Device device = o.accel && ls::cuda::is_available() ? ls::Device::cuda(0) : ls::Device::cpu();
  std::printf("Using device: %s\n", device.is_cuda() ? "cuda" : "cpu");

  // Load data.
  examples::Corpus corpus(o.data);
  const ls::Tensor train_data = batchify(corpus.train, o.batch_size, device, "train");  // (N / 20, 20)
  const ls::Tensor val_data = batchify(corpus.valid, kEvalBatchSize, device, "valid");   // (N / 10, 10)
  const ls::Tensor test_data = batchify(corpus.test, kEvalBatchSize, device, "test");

  // Build the model.
  const int64_t ntokens = corpus.dictionary.size();
  auto model = std::make_shared<RNNModel>(o.model, ntokens, o.emsize, o.nhid, o.nlayers, o.dropout, o.tied);
  model->to(device);
  std::printf("%lld words, %lld / %lld / %lld tokens (train / valid / test)\n", static_cast<long long>(ntokens),
              static_cast<long long>(corpus.train.size(0)), static_cast<long long>(corpus.valid.size(0)),
              static_cast<long long>(corpus.test.size(0)));
  int64_t values = 0;  // a tied weight is listed once (Note [Shared parameters])
  for (const auto& p : model->parameters()) values += p.numel();
  std::printf("model: %s%s, %lld parameters\n", o.model.c_str(), o.tied ? " (tied)" : "",
              static_cast<long long>(values));

  // Loop over epochs.
  double lr = o.lr;
  double best_val_loss = 0;
  for (int64_t epoch = 1; epoch <= o.epochs; ++epoch) {
    const auto epoch_start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    train(epoch, *model, train_data, lr, o);
    const double val_loss = evaluate(*model, val_data, o);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
    const double cpu_seconds = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    std::printf("%s\n", std::string(89, '-').c_str());
    std::printf("| end of epoch %3lld | time: %5.2fs | valid loss %5.2f | valid ppl %8.2f\n",
                static_cast<long long>(epoch), seconds, val_loss, std::exp(val_loss));
    std::printf("%s\n", std::string(89, '-').c_str());
    std::printf("epoch %lld valid_loss %.4f lr %g cpu_seconds %.2f seconds %.2f\n", static_cast<long long>(epoch),
                val_loss, lr, cpu_seconds, seconds);
    std::fflush(stdout);
    // Save the model if the validation loss is the best we've seen so far.
    if (epoch == 1 || val_loss < best_val_loss) {
      ls::nn::save(*model, o.save);
      best_val_loss = val_loss;
    } else {
      // Anneal the learning rate if no improvement has been seen in the validation dataset.
      lr /= 4.0;
    }
  }

  // Load the best saved model and run it on the test data.
  ls::nn::load(*model, o.save);
  const double test_loss = evaluate(*model, test_data, o);
  std::printf("%s\n", std::string(89, '=').c_str());
  std::printf("| End of training | test loss %5.2f | test ppl %8.2f\n", test_loss, std::exp(test_loss));
  std::printf("%s\n", std::string(89, '=').c_str());
  std::printf("final best_valid_loss %.4f test_loss %.4f\n", best_val_loss, test_loss);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ls::cli::Program p("word_language_model",
                     "pytorch/examples' word_language_model on lockstep: an LSTM (or GRU) language model "
                     "trained with truncated BPTT on a word-level corpus (WikiText-2's layout).");
  Options o;
  p.text("--data", o.data, "directory with train.txt, valid.txt and test.txt (tools/make_word_corpus.py writes one)");
  p.choice("--model", o.model, "type of recurrent network", {"LSTM", "GRU"});
  p.integer("--emsize", o.emsize, "size of word embeddings", 1, 100000);
  p.integer("--nhid", o.nhid, "number of hidden units per layer", 1, 100000);
  p.integer("--nlayers", o.nlayers, "number of layers", 1, 1000);
  p.real("--lr", o.lr, "initial learning rate", 0.0, 1e6, /*above_lo=*/true);
  p.real("--clip", o.clip, "gradient clipping: the largest total norm", 0.0, 1e9, /*above_lo=*/true);
  p.integer("--epochs", o.epochs, "upper epoch limit", 1, 100000);
  p.integer("--batch-size,--batch_size", o.batch_size, "batch size (columns of the training stream)", 1, 1000000);
  p.integer("--bptt", o.bptt, "sequence length: the steps of one batch", 1, 1000000);
  p.real("--dropout", o.dropout, "dropout applied to layers (0 = no dropout)", 0.0, 1.0);
  p.flag("--tied", o.tied, "tie the word embedding and softmax weights (needs --nhid equal to --emsize)");
  p.integer("--seed", o.seed, "random seed", 0);
  p.integer("--log-interval", o.log_interval, "report interval, in batches", 1);
  p.text("--save", o.save, "path to save the final model (safetensors)");
  p.flag("--dry-run", o.dry_run, "one batch an epoch: verify the code and the model");
  p.flag("--accel", o.accel, "train on CUDA when available");
  p.threads(o.threads);
  p.parse(argc, argv);
  if (o.tied && o.nhid != o.emsize) {
    p.usage_error("--tied needs --nhid equal to --emsize, got " + std::to_string(o.nhid) + " and " +
                  std::to_string(o.emsize));
  }
  return ls::cli::run("word_language_model", [&] { return run(o); });
}
