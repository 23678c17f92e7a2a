// bench/bench_models.h — the benchmark workloads shared by bench_step and bench_ddp:
// ResNet or BERT, its fixed input and labels, its loss, and its FLOP count.
//
// Built exactly like bench/torch/models.py's workload(), so numbers compare with
// PyTorch's (bench/compare_step.sh, bench/figures/torch_ddp_bench.py):
//   ResNet: input randn (B, 3, S, S), labels randint [0, 1000) (B), cross-entropy.
//   BERT:   ids randint [0, vocab) (B, T), labels randint [0, vocab) (B, T), MLM loss =
//           cross-entropy of logits.reshape(B*T, vocab) against labels.reshape(B*T)
//           (every position, as the reference does; no masking), dropout on (training).
//   Seed 0 for weights and inputs; the same inputs every step.
// --layers sets BERT's encoder depth (default 12 for bert, 2 for bert-tiny); bert-tiny is
// BertConfig::tiny(), whose 64 positions make its default --seq 64 (bert: 128).
// mlp-reversed (no PyTorch twin): --layers (default 8) Linear(2048, 2048) layers with ReLU
// between them, REGISTERED LAST-TO-FIRST (fc7 first, fc0 last) but run fc0 -> fc7; input
// randn (B, 2048), labels randint [0, 2048) (B), cross-entropy. DDP's default buckets follow
// reverse registration order, i.e. forward order here, so bucket 0 holds fc0, whose gradient
// is ready LAST: nothing overlaps until the traced-order rebuild (docs/ddp.md section 6,
// bench/figures/beyond.sh) reorders the buckets.
//
// FLOP count (forward_flops): the forward FLOPs of convolutions, linear layers and
// attention matmuls, 2 FLOPs per multiply-add; norms, activations, pooling and
// embeddings are not counted. ResNet: computed by WALKING THE MODEL's layers (each
// Conv2d's options and the spatial size flowing through the blocks, plus fc). BERT: an
// ANALYTIC FORMULA from BertConfig (per layer 4 projections, 2 FFN linears, scores and
// context matmuls; then the MLM head's linear and the decoder). A training step is
// counted as 3 x forward (backward = grad input + grad weight, each about one forward).
//
// The two networks have different forward signatures (ResNet is a UnaryModule, BERT's
// forward takes an optional padding mask), so the workload keeps the typed pointer of
// the one it built; visit_net() hands it to a generic lambda, which is how bench_ddp
// wraps either in DistributedDataParallel<M>.
//
// Read before: models/resnet.h, models/bert.h.
// Read next: bench/bench_step.cpp, bench/bench_ddp.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/models.h"

namespace lockstep::cli {
class Program;  // tools/cli.h
}  // namespace lockstep::cli

namespace lockstep::bench {

// The model flags common to bench_step and bench_ddp.
struct ModelOptions {
  std::string model = "resnet50";  // resnet50 | resnet18 | bert | bert-tiny | mlp-reversed
  int64_t batch = 8, image = 224;
  int64_t seq = -1, layers = -1;   // -1: the model's default (settled by make_workload)
};

// Adds the model flags (--model --batch --image --seq --layers) to a program's
// command line (tools/cli.h), typed and range-checked; --seq and --layers keep -1
// (the model's default) unless given.
void add_model_options(cli::Program& program, ModelOptions& o);
// After parse(): a usage error (exit 2) for model flags that contradict each other (a
// BERT --seq beyond the model's positions), before any model is built.
void check_model_options(cli::Program& program, const ModelOptions& o);
// Adds --iters (timed iterations, >= 1), --warmup (untimed ones first, >= 0) and --threads.
void add_timing_options(cli::Program& program, int& iters, int& warmup, int& threads);

// mlp-reversed's network (see the file header): (B, width) -> (B, width) logits.
struct ReversedMLP : nn::UnaryModule {
  static constexpr int64_t kWidth = 2048;
  explicit ReversedMLP(int64_t layers);
  std::string type_name() const override { return "ReversedMLP"; }
  Tensor forward(const Tensor& x) override;  // (B, kWidth) -> (B, kWidth)
  std::vector<std::shared_ptr<nn::Linear>> layers;  // in FORWARD order (fc0 first)
};

struct Workload {
  // Exactly one of resnet / bert / mlp is set; module is the same object, untyped.
  std::shared_ptr<models::ResNet> resnet;
  std::shared_ptr<models::Bert> bert;
  std::shared_ptr<ReversedMLP> mlp;
  std::shared_ptr<nn::Module> module;
  Tensor input;   // ResNet: (B, 3, S, S) float; BERT: ids (B, T) int64; MLP: (B, 2048) float
  Tensor labels;  // ResNet, MLP: (B) int64; BERT: (B, T) int64
  double forward_flops = 0.0;
  std::string shape_json;  // the input-shape fields of a summary line, e.g. "\"image\":224"

  // The loss of the network's output for `input`: cross-entropy against labels.
  Tensor loss_of(const Tensor& output) const;
  // Forward of the bare network + loss.
  Tensor loss() const {
    return loss_of(resnet ? resnet->forward(input) : mlp ? mlp->forward(input) : bert->forward(input));
  }
  int64_t num_parameters() const;
};

// Builds the model (seed 0), its input and labels, in training mode. Settles o.seq and
// o.layers to the model's defaults when they are -1. Throws ls::Error when --seq exceeds
// the model's positions.
Workload make_workload(ModelOptions& o);

// Calls f(std::shared_ptr<models::ResNet>), f(std::shared_ptr<ReversedMLP>) or
// f(std::shared_ptr<models::Bert>).
template <class F>
decltype(auto) visit_net(const Workload& w, F&& f) {
  if (w.resnet) return f(w.resnet);
  if (w.mlp) return f(w.mlp);
  return f(w.bert);
}

}  // namespace lockstep::bench
