// bench/bench_models.cpp — model flags, workload construction and FLOP counts for the
// benchmark programs (see bench/bench_models.h for what is built and why).
// Read before: bench/bench_models.h. Read next: bench/bench_step.cpp.
#include "bench/bench_models.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "core/factory.h"
#include "core/nn_ops.h"
#include "core/rng.h"
#include "tools/cli.h"

namespace lockstep::bench {

void add_model_options(cli::Program& p, ModelOptions& o) {
  p.choice("--model", o.model, "the network", {"resnet50", "resnet18", "bert", "bert-tiny", "mlp-reversed"});
  p.integer("--batch", o.batch, "examples per step (per rank)", 1, 1 << 20);
  p.integer("--image", o.image, "ResNet input height and width", 32, 4096);
  p.integer("--seq", o.seq, "BERT sequence length (default: bert 128, bert-tiny 64)", 1, 1 << 20)->default_str("");
  p.integer("--layers", o.layers, "BERT encoder layers (default: bert 12, bert-tiny 2) or mlp-reversed layers (8)",
            1, 4096)
      ->default_str("");
}

void add_timing_options(cli::Program& p, int& iters, int& warmup, int& threads) {
  p.integer("--iters", iters, "timed iterations", 1, 1000000);
  p.integer("--warmup", warmup, "untimed iterations first", 0, 1000000);
  p.threads(threads);
}

namespace {

// Forward FLOPs of `conv` on an (N, C_in, h, w) input; updates h, w to the output size.
double conv_flops(const nn::Conv2d& conv, int64_t n, int64_t& h, int64_t& w) {
  const auto& o = conv.options;
  int64_t* hw[2] = {&h, &w};
  for (int d = 0; d < 2; ++d) {
    *hw[d] = (*hw[d] + 2 * o.padding()[d] - o.dilation()[d] * (o.kernel_size()[d] - 1) - 1) /
                 o.stride()[d] +
             1;
  }
  const double macs_per_output =
      static_cast<double>(o.in_channels() / o.groups()) * o.kernel_size()[0] * o.kernel_size()[1];
  return 2.0 * static_cast<double>(n * o.out_channels() * h * w) * macs_per_output;
}

// Walks conv1, maxpool, every block of layer1..4 and fc in forward order.
double resnet_forward_flops(const models::ResNet& net, int64_t n, int64_t image) {
  int64_t h = image, w = image;
  double flops = conv_flops(*net.conv1, n, h, w);
  const auto& pool = *net.maxpool;
  h = (h + 2 * pool.padding[0] - pool.kernel_size[0]) / pool.stride[0] + 1;
  w = (w + 2 * pool.padding[1] - pool.kernel_size[1]) / pool.stride[1] + 1;
  for (const auto& stage : {net.layer1, net.layer2, net.layer3, net.layer4}) {
    for (size_t i = 0; i < stage->size(); ++i) {
      const int64_t h_in = h, w_in = w;
      std::shared_ptr<nn::Sequential> downsample;
      if (auto b = std::dynamic_pointer_cast<models::Bottleneck>((*stage)[i])) {
        for (const auto& c : {b->conv1, b->conv2, b->conv3}) flops += conv_flops(*c, n, h, w);
        downsample = b->downsample;
      } else if (auto b = std::dynamic_pointer_cast<models::BasicBlock>((*stage)[i])) {
        for (const auto& c : {b->conv1, b->conv2}) flops += conv_flops(*c, n, h, w);
        downsample = b->downsample;
      }
      if (downsample) {
        int64_t hd = h_in, wd = w_in;
        auto conv = std::dynamic_pointer_cast<nn::Conv2d>((*downsample)[0]);
        if (conv) flops += conv_flops(*conv, n, hd, wd);
      }
    }
  }
  return flops + 2.0 * static_cast<double>(n * net.fc->in_features * net.fc->out_features);
}

double bert_forward_flops(const models::BertConfig& c, int64_t batch, int64_t seq) {
  const double tokens = static_cast<double>(batch * seq), H = c.hidden, F = c.ffn;
  const double per_layer = 2.0 * tokens * H * (4.0 * H)     // Q, K, V, output projections
                           + 2.0 * tokens * H * (2.0 * F)   // FFN up and down
                           + 2.0 * 2.0 * tokens * seq * H;  // scores Q K^T, context P V
  const double head = 2.0 * tokens * H * H + 2.0 * tokens * H * c.vocab_size;  // head + decoder
  return per_layer * static_cast<double>(c.layers) + head;
}

}  // namespace

void check_model_options(cli::Program& program, const ModelOptions& o) {
  if (o.model != "bert" && o.model != "bert-tiny") return;
  const int64_t positions =
      (o.model == "bert" ? models::BertConfig::base() : models::BertConfig::tiny()).max_positions;
  if (o.seq > positions) {
    program.usage_error("--seq " + std::to_string(o.seq) + " exceeds " + o.model + "'s " + std::to_string(positions) +
                        " positions; pass a smaller --seq");
  }
}

ReversedMLP::ReversedMLP(int64_t num_layers) {
  LS_CHECK(num_layers >= 1, "ReversedMLP: needs at least one layer, got ", num_layers);
  layers.resize(static_cast<size_t>(num_layers));
  for (int64_t i = num_layers - 1; i >= 0; --i) {  // registered last-to-first (on purpose)
    layers[static_cast<size_t>(i)] = register_module(
        "fc" + std::to_string(i), std::make_shared<nn::Linear>(kWidth, kWidth));
  }
}

Tensor ReversedMLP::forward(const Tensor& x) {
  Tensor h = x;  // (B, kWidth)
  for (size_t i = 0; i < layers.size(); ++i) {
    h = layers[i]->forward(h);  // (B, kWidth)
    if (i + 1 < layers.size()) h = h.relu();
  }
  return h;
}

Tensor Workload::loss_of(const Tensor& output) const {
  if (resnet || mlp) return cross_entropy(output, labels);  // output (B, 1000) or (B, 2048)
  const int64_t vocab = output.size(-1), tokens = labels.numel();
  return cross_entropy(output.reshape({tokens, vocab}), labels.reshape({tokens}));  // (B*T, V)
}

int64_t Workload::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : module->parameters()) n += p.numel();
  return n;
}

Workload make_workload(ModelOptions& o) {
  manual_seed(0);
  Workload wl;
  if (o.model == "resnet50" || o.model == "resnet18") {
    wl.resnet = o.model == "resnet50" ? models::resnet50() : models::resnet18();
    wl.module = wl.resnet;
    wl.input = randn({o.batch, 3, o.image, o.image});  // (B, 3, S, S)
    wl.labels = randint(0, 1000, {o.batch});           // (B)
    wl.forward_flops = resnet_forward_flops(*wl.resnet, o.batch, o.image);
    wl.shape_json = "\"image\":" + std::to_string(o.image);
  } else if (o.model == "mlp-reversed") {
    if (o.layers == -1) o.layers = 8;
    const int64_t width = ReversedMLP::kWidth;
    wl.mlp = std::make_shared<ReversedMLP>(o.layers);
    wl.module = wl.mlp;
    wl.input = randn({o.batch, width});           // (B, 2048)
    wl.labels = randint(0, width, {o.batch});     // (B)
    wl.forward_flops = 2.0 * static_cast<double>(o.batch * width * width * o.layers);
    wl.shape_json = "\"width\":" + std::to_string(width) + ",\"layers\":" + std::to_string(o.layers);
  } else {
    models::BertConfig config =
        o.model == "bert" ? models::BertConfig::base() : models::BertConfig::tiny();
    if (o.layers > 0) config.layers = o.layers;
    o.layers = config.layers;
    if (o.seq == -1) o.seq = std::min<int64_t>(128, config.max_positions);
    LS_CHECK(o.seq <= config.max_positions, "bench: --seq ", o.seq, " exceeds ", o.model, "'s ",
             config.max_positions, " positions; pass a smaller --seq");
    wl.bert = std::make_shared<models::Bert>(config);
    wl.module = wl.bert;
    wl.input = randint(0, config.vocab_size, {o.batch, o.seq});   // (B, T)
    wl.labels = randint(0, config.vocab_size, {o.batch, o.seq});  // (B, T)
    wl.forward_flops = bert_forward_flops(config, o.batch, o.seq);
    wl.shape_json =
        "\"seq\":" + std::to_string(o.seq) + ",\"layers\":" + std::to_string(config.layers);
  }
  wl.module->train();
  return wl;
}

}  // namespace lockstep::bench
