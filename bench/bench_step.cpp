// bench/bench_step.cpp — milliseconds of one training step (forward, backward, SGD), ResNet or
// BERT.
//
//   build/bin/bench_step --model resnet50|resnet18|bert|bert-tiny [--batch 8] [--image 224]
//                        [--seq 128] [--iters 3] [--warmup 1] [--threads 1] [--layers L]
//                        [--profile 0|1]
//
// The step mirrors shared/ref/torch_step.py with shared/ref/torch_models.py, so the
// two can be compared number for number (bench/compare_step.sh):
//   ResNet: input randn (B, 3, S, S), labels randint [0, 1000) (B), cross-entropy.
//   BERT:   ids randint [0, vocab) (B, T), labels randint [0, vocab) (B, T), MLM loss =
//           cross-entropy of logits.reshape(B*T, vocab) against labels.reshape(B*T)
//           (every position, as the reference does; no masking), dropout on (training).
//   SGD lr 0.01 momentum 0.9; seed 0 for weights and inputs; the same inputs every step.
// Timing, like the reference: fwd = forward + loss; bwd = zero_grad + backward;
// opt = optimizer step; step = all three. Warm-up steps are printed (warmup: true)
// but left out of the medians.
// --layers sets BERT's encoder depth (default 12 for bert, 2 for bert-tiny), like
// torch_step.py --layers; bert-tiny is BertConfig::tiny() (no PyTorch counterpart),
// whose 64 positions make its default --seq 64 (bert: 128).
//
// Output: one JSON line per step, then a summary line: medians of step/fwd/bwd/opt ms,
// cpu_ms (process CPU time of the step, all threads: with 1 thread on a busy machine,
// cpu_ms < step_ms shows how much of the step the scheduler gave to other processes),
// params, train_gflop (per step), gflops (train_gflop / median step), peak_rss_mb
// (getrusage ru_maxrss of this process: the high-water mark of resident memory).
//
// FLOP count (train_gflop): 3 x the forward FLOPs of convolutions, linear layers and
// attention matmuls, 2 FLOPs per multiply-add (backward = grad input + grad weight,
// each about one forward); norms, activations, pooling, embeddings and the optimizer
// are not counted. ResNet: computed by WALKING THE MODEL's layers (each Conv2d's
// options and the spatial size flowing through the blocks, plus fc). BERT: an
// ANALYTIC FORMULA from BertConfig (per layer 4 projections, 2 FFN linears, scores
// and context matmuls; then the MLM head's linear and the decoder).
//
// --profile 1 profiles the timed steps (not the warm-up) with ls::profiler and prints
// its table to stderr at the end (core/profiler.h). LOCKSTEP_PROFILE=1 also works but
// includes the warm-up step, whose first calls create oneDNN primitives.
//
// Read before: models/resnet.h, models/bert.h, optim/sgd.h, core/profiler.h.
// Read next: bench/compare_step.sh, docs/results/cpu_step.md.
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/nn_ops.h"
#include "core/parallel.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "models/models.h"
#include "optim/sgd.h"

namespace {

namespace ls = lockstep;

struct Options {
  std::string model = "resnet50";
  int64_t batch = 8, image = 224, seq = -1, layers = -1;  // -1: the model's default
  int iters = 3, warmup = 1, threads = 1;
  bool profile = false;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "bench_step: %s\nusage: bench_step --model resnet50|resnet18|bert|bert-tiny "
               "[--batch B] [--image S] [--seq T] [--iters N] [--warmup W] [--threads T] "
               "[--layers L] [--profile 0|1]\n",
               why.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) usage(arg + " needs a value");
    const char* v = argv[++i];
    if (arg == "--model") {
      o.model = v;
    } else if (arg == "--batch") {
      o.batch = std::atoll(v);
    } else if (arg == "--image") {
      o.image = std::atoll(v);
    } else if (arg == "--seq") {
      o.seq = std::atoll(v);
    } else if (arg == "--iters") {
      o.iters = std::atoi(v);
    } else if (arg == "--warmup") {
      o.warmup = std::atoi(v);
    } else if (arg == "--threads") {
      o.threads = std::atoi(v);
    } else if (arg == "--layers") {
      o.layers = std::atoll(v);
    } else if (arg == "--profile") {
      o.profile = std::atoi(v) != 0;
    } else {
      usage("unknown option " + arg);
    }
  }
  if (o.model != "resnet50" && o.model != "resnet18" && o.model != "bert" &&
      o.model != "bert-tiny") {
    usage("unknown model " + o.model);
  }
  if (o.batch < 1 || o.image < 32 || (o.seq != -1 && o.seq < 1) || o.iters < 1 || o.warmup < 0 ||
      o.threads < 1 || (o.layers != -1 && o.layers < 1)) {
    usage(
        "--batch, --seq, --iters, --threads, --layers must be >= 1, --warmup >= 0, --image >= 32");
  }
  return o;
}

// ---- FLOPs (see the file header) ----

// Forward FLOPs of `conv` on an (N, C_in, h, w) input; updates h, w to the output size.
double conv_flops(const ls::nn::Conv2d& conv, int64_t n, int64_t& h, int64_t& w) {
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
double resnet_forward_flops(const ls::models::ResNet& net, int64_t n, int64_t image) {
  int64_t h = image, w = image;
  double flops = conv_flops(*net.conv1, n, h, w);
  const auto& pool = *net.maxpool;
  h = (h + 2 * pool.padding[0] - pool.kernel_size[0]) / pool.stride[0] + 1;
  w = (w + 2 * pool.padding[1] - pool.kernel_size[1]) / pool.stride[1] + 1;
  for (const auto& stage : {net.layer1, net.layer2, net.layer3, net.layer4}) {
    for (size_t i = 0; i < stage->size(); ++i) {
      const int64_t h_in = h, w_in = w;
      std::shared_ptr<ls::nn::Sequential> downsample;
      if (auto b = std::dynamic_pointer_cast<ls::models::Bottleneck>((*stage)[i])) {
        for (const auto& c : {b->conv1, b->conv2, b->conv3}) flops += conv_flops(*c, n, h, w);
        downsample = b->downsample;
      } else if (auto b = std::dynamic_pointer_cast<ls::models::BasicBlock>((*stage)[i])) {
        for (const auto& c : {b->conv1, b->conv2}) flops += conv_flops(*c, n, h, w);
        downsample = b->downsample;
      }
      if (downsample) {
        int64_t hd = h_in, wd = w_in;
        auto conv = std::dynamic_pointer_cast<ls::nn::Conv2d>((*downsample)[0]);
        if (conv) flops += conv_flops(*conv, n, hd, wd);
      }
    }
  }
  return flops + 2.0 * static_cast<double>(n * net.fc->in_features * net.fc->out_features);
}

double bert_forward_flops(const ls::models::BertConfig& c, int64_t batch, int64_t seq) {
  const double tokens = static_cast<double>(batch * seq), H = c.hidden, F = c.ffn;
  const double per_layer = 2.0 * tokens * H * (4.0 * H)     // Q, K, V, output projections
                           + 2.0 * tokens * H * (2.0 * F)   // FFN up and down
                           + 2.0 * 2.0 * tokens * seq * H;  // scores Q K^T, context P V
  const double head = 2.0 * tokens * H * H + 2.0 * tokens * H * c.vocab_size;  // head + decoder
  return per_layer * static_cast<double>(c.layers) + head;
}

// ---- the step ----

struct Workload {
  std::shared_ptr<ls::nn::Module> module;
  std::function<ls::Tensor()> loss;  // forward + loss
  double forward_flops = 0.0;
  std::string shape_json;  // the input-shape fields of the summary line
};

Workload make_workload(Options& o) {  // settles o.seq's default
  ls::manual_seed(0);
  Workload wl;
  if (o.model == "resnet50" || o.model == "resnet18") {
    auto net = o.model == "resnet50" ? ls::models::resnet50() : ls::models::resnet18();
    ls::Tensor x = ls::randn({o.batch, 3, o.image, o.image});  // (B, 3, S, S)
    ls::Tensor y = ls::randint(0, 1000, {o.batch});            // (B)
    wl.module = net;
    wl.loss = [net, x, y] { return ls::cross_entropy(net->forward(x), y); };
    wl.forward_flops = resnet_forward_flops(*net, o.batch, o.image);
    wl.shape_json = "\"image\":" + std::to_string(o.image);
  } else {
    ls::models::BertConfig config =
        o.model == "bert" ? ls::models::BertConfig::base() : ls::models::BertConfig::tiny();
    if (o.layers > 0) config.layers = o.layers;
    if (o.seq == -1) o.seq = std::min<int64_t>(128, config.max_positions);
    if (o.seq > config.max_positions) {
      usage("--seq " + std::to_string(o.seq) + " exceeds the model's " +
            std::to_string(config.max_positions) + " positions");
    }
    auto net = std::make_shared<ls::models::Bert>(config);
    const int64_t vocab = config.vocab_size, tokens = o.batch * o.seq;
    ls::Tensor ids = ls::randint(0, vocab, {o.batch, o.seq});     // (B, T)
    ls::Tensor labels = ls::randint(0, vocab, {o.batch, o.seq});  // (B, T)
    wl.module = net;
    wl.loss = [net, ids, labels, vocab, tokens] {
      ls::Tensor logits = net->forward(ids);  // (B, T, vocab)
      return ls::cross_entropy(logits.reshape({tokens, vocab}), labels.reshape({tokens}));
    };
    wl.forward_flops = bert_forward_flops(config, o.batch, o.seq);
    wl.shape_json =
        "\"seq\":" + std::to_string(o.seq) + ",\"layers\":" + std::to_string(config.layers);
  }
  wl.module->train();
  return wl;
}

double ms_between(std::chrono::steady_clock::time_point a,
                  std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// CPU time of this process (all its threads), for telling a slow step from a busy machine.
double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux: kilobytes
}

}  // namespace

namespace {

int run(int argc, char** argv) {
  Options o = parse(argc, argv);
  ls::set_num_threads(o.threads);
  Workload wl = make_workload(o);
  int64_t params = 0;
  for (const ls::Tensor& p : wl.module->parameters()) params += p.numel();
  ls::optim::SGD sgd(wl.module->parameters(), ls::optim::SGDOptions(0.01).momentum(0.9));

  using clock = std::chrono::steady_clock;
  std::vector<double> step_ms, fwd_ms, bwd_ms, opt_ms, cpu_ms;
  for (int i = 0; i < o.warmup + o.iters; ++i) {
    if (o.profile && i == o.warmup) {
      ls::profiler::reset();
      ls::profiler::enable();
    }
    const double cpu0 = process_cpu_ms();
    const auto t0 = clock::now();
    ls::Tensor loss = wl.loss();
    const auto t1 = clock::now();
    sgd.zero_grad();
    loss.backward();
    const auto t2 = clock::now();
    sgd.step();
    const auto t3 = clock::now();
    const double c = process_cpu_ms() - cpu0;
    const bool warm = i < o.warmup;
    const double s = ms_between(t0, t3), f = ms_between(t0, t1), b = ms_between(t1, t2),
                 u = ms_between(t2, t3);
    std::printf(
        "{\"bench\":\"step\",\"model\":\"%s\",\"iter\":%d,\"warmup\":%s,\"step_ms\":%.2f,"
        "\"fwd_ms\":%.2f,\"bwd_ms\":%.2f,\"opt_ms\":%.2f,\"cpu_ms\":%.2f,\"loss\":%.5f}\n",
        o.model.c_str(), i, warm ? "true" : "false", s, f, b, u, c, loss.item<float>());
    std::fflush(stdout);
    if (warm) continue;
    step_ms.push_back(s);
    fwd_ms.push_back(f);
    bwd_ms.push_back(b);
    opt_ms.push_back(u);
    cpu_ms.push_back(c);
  }
  if (o.profile) ls::profiler::disable();
  const double train_gflop = 3.0 * wl.forward_flops * 1e-9;
  const double step = median(step_ms);
  std::printf(
      "{\"bench\":\"step\",\"summary\":true,\"model\":\"%s\",\"batch\":%lld,"
      "%s,\"threads\":%d,\"iters\":%d,\"params\":%lld,"
      "\"step_ms\":%.2f,\"fwd_ms\":%.2f,\"bwd_ms\":%.2f,\"opt_ms\":%.2f,\"cpu_ms\":%.2f,"
      "\"train_gflop\":%.3f,\"gflops\":%.2f,\"peak_rss_mb\":%.1f}\n",
      o.model.c_str(), static_cast<long long>(o.batch), wl.shape_json.c_str(), o.threads, o.iters,
      static_cast<long long>(params), step, median(fwd_ms), median(bwd_ms), median(opt_ms),
      median(cpu_ms), train_gflop, train_gflop / (step * 1e-3), peak_rss_mb());
  std::fflush(stdout);  // before a profiler table goes to stderr
  if (o.profile) std::fputs(ls::profiler::report().c_str(), stderr);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_step: %s\n", e.what());
    return 1;
  }
}
