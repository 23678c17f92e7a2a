// bench/bench_grad_ready.cpp — when each parameter's gradient becomes ready in one
// backward: the measured input of the scaling model (bench/simulate/simulate.py).
//
//   build/bin/bench_grad_ready --model resnet18 --image 64 --batch 4 [--iters 5]
//                              [--warmup 1] [--threads 1]
// Model flags (--model --batch --image --seq --layers) as bench_step (bench/bench_models.h).
//
// One process, no communication (world 1, no DDP): forward + loss, backward, SGD step
// (lr 0.01, momentum 0.9) + zero_grad, like bench_ddp --mode local. Before the loop a
// post-accumulate-grad hook is registered on every parameter; it records the time since
// loss.backward() was called at which that parameter's gradient was accumulated, which is
// the moment DDP's own hook would mark it ready. The hook itself only reads the clock,
// so it adds no per-parameter copy: the copy into DDP's bucket is the simulator's to
// model. (bench_ddp, which runs DDP, cannot use such hooks: any post-accumulate-grad
// hook but DDP's turns its gradient sinks off; its clock is a node on the loss, Note
// [Backward clock] in bench/bench_ddp.cpp.)
//
// Timing of one iteration:
//   fwd_ms   forward + loss;
//   bwd_ms   loss.backward() until it returns (no DDP: no finalize, no wait);
//   opt_ms   optimizer step + zero_grad;
//   ready_ms per parameter, from loss.backward() to its hook (<= bwd_ms).
//
// Also measured once, after the loop (inputs of DDP's overheads in the simulator):
//   copy_gbps      GB/s of copying one tensor of each parameter's size into one flat
//                  buffer, as DDP's hooks copy gradients into buckets (median of 5 passes);
//   buffer_bytes   the model's buffers (BatchNorm running stats), which a DDP forward
//                  broadcasts one collective per buffer.
//
// Output: one JSON line per iteration (warm-up ones marked), then a summary line with the
// medians over the timed iterations of fwd/bwd/opt ms and a "params" array in REGISTRATION
// order (the order of Module::named_parameters, i.e. DDP's parameter indices):
//   {"name": "layer1.0.conv1.weight", "bytes": 147456, "ready_ms": 12.3, "ready_seq": 57}
// where ready_ms is the median over timed iterations and ready_seq the parameter's place
// in the order the hooks fired in the last iteration (0 first): the order DDP traces for
// its bucket rebuild, exact where medians of nearly equal times could swap. A parameter
// whose gradient never became ready (unused in forward) gets ready_ms and ready_seq -1.
//
// Read before: bench/bench_models.h, bench/bench_ddp.cpp (Note [Backward clock]).
// Read next: bench/simulate/simulate.py, docs/results/simulate.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "tools/cli.h"
#include "autograd/accumulate_grad.h"
#include "bench/bench_models.h"
#include "core/factory.h"
#include "core/grad_mode.h"
#include "core/parallel.h"
#include "optim/sgd.h"
#include "bench/bench_stats.h"

namespace {

namespace ls = lockstep;
using Clock = std::chrono::steady_clock;

struct Options {
  ls::bench::ModelOptions model;
  int iters = 5, warmup = 1, threads = 1;
};

Options parse(int argc, char** argv) {
  Options o;
  o.model.batch = 4;
  ls::cli::Program p("bench_grad_ready", "When each parameter's gradient becomes ready in backward (for "
                                         "bench/simulate); JSON lines, the last a summary.");
  ls::bench::add_model_options(p, o.model);
  ls::bench::add_timing_options(p, o.iters, o.warmup, o.threads);
  p.parse(argc, argv);
  ls::bench::check_model_options(p, o.model);
  return o;
}

double ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The median, or -1 when there is nothing to take it of (bench/bench_stats.h).
double median(const std::vector<double>& v) { return lockstep::bench::median(v, -1.0); }

// Per-parameter ready clock: the hooks write into `ready`, indexed like the parameters.
struct ReadyClock {
  Clock::time_point backward_start;
  std::vector<double> ready;  // ms since backward_start; -1 until the hook fires
  std::vector<int> seq;       // the hook's place in this backward's firing order; -1 until then
  int fired = 0;
  std::vector<ls::autograd::HookHandle> hooks;
};

std::shared_ptr<ReadyClock> install_ready_clock(const ls::nn::NamedTensors& params) {
  auto clock = std::make_shared<ReadyClock>();
  clock->ready.assign(params.size(), -1.0);
  clock->seq.assign(params.size(), -1);
  std::weak_ptr<ReadyClock> weak = clock;
  for (size_t i = 0; i < params.size(); ++i) {
    clock->hooks.push_back(params[i].second.register_post_accumulate_grad_hook(
        [weak, i](ls::Tensor&) {
          if (auto c = weak.lock()) {
            c->ready[i] = ms(c->backward_start, Clock::now());
            if (c->seq[i] < 0) c->seq[i] = c->fired++;
          }
        }));
  }
  return clock;
}

// GB/s of copying every parameter-sized tensor into one flat buffer (DDP's bucket copy).
double copy_gbps(const std::vector<ls::Tensor>& params) {
  ls::NoGradGuard no_grad;
  int64_t n = 0;
  size_t bytes = 0;
  for (const ls::Tensor& p : params) n += p.numel(), bytes += p.nbytes();
  ls::Tensor flat = ls::zeros({n});  // (total params)
  std::vector<double> gbps;
  for (int pass = 0; pass < 6; ++pass) {
    const auto t0 = Clock::now();
    int64_t offset = 0;
    for (const ls::Tensor& p : params) {
      flat.narrow(0, offset, p.numel()).copy_(p.reshape({-1}));
      offset += p.numel();
    }
    const double s = ms(t0, Clock::now()) * 1e-3;
    if (pass > 0) gbps.push_back(static_cast<double>(bytes) / s / 1e9);  // pass 0 warms up
  }
  return median(gbps);
}

// Parameter names come from the model's own registration; quote them for JSON anyway.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  out += '"';
  return out;
}

int run_main(int argc, char** argv) {
  Options o = parse(argc, argv);
  ls::set_num_threads(o.threads);
  ls::bench::Workload wl = ls::bench::make_workload(o.model);
  const ls::nn::NamedTensors named = wl.module->named_parameters();
  const std::vector<ls::Tensor> params = wl.module->parameters();
  auto clock = install_ready_clock(named);
  ls::optim::SGD sgd(params, ls::optim::SGDOptions(0.01).momentum(0.9));

  std::vector<double> fwd, bwd, opt;
  std::vector<std::vector<double>> ready(named.size());  // [param][timed iteration]
  for (int i = 0; i < o.warmup + o.iters; ++i) {
    const auto t0 = Clock::now();
    ls::Tensor loss = wl.loss();
    const auto t1 = Clock::now();
    std::fill(clock->ready.begin(), clock->ready.end(), -1.0);
    std::fill(clock->seq.begin(), clock->seq.end(), -1);
    clock->fired = 0;
    clock->backward_start = t1;
    loss.backward();
    const auto t2 = Clock::now();
    sgd.step();
    sgd.zero_grad();
    const auto t3 = Clock::now();
    const bool warm = i < o.warmup;
    const double last_ready = *std::max_element(clock->ready.begin(), clock->ready.end());
    std::printf("{\"bench\":\"grad_ready\",\"iter\":%d,\"warmup\":%s,\"fwd_ms\":%.3f,"
                "\"bwd_ms\":%.3f,\"last_ready_ms\":%.3f,\"opt_ms\":%.3f,\"loss\":%.5f}\n",
                i, warm ? "true" : "false", ms(t0, t1), ms(t1, t2), last_ready, ms(t2, t3),
                loss.item<float>());
    std::fflush(stdout);
    if (warm) continue;
    fwd.push_back(ms(t0, t1));
    bwd.push_back(ms(t1, t2));
    opt.push_back(ms(t2, t3));
    for (size_t p = 0; p < named.size(); ++p) {
      if (clock->ready[p] >= 0) ready[p].push_back(clock->ready[p]);
    }
  }

  std::string list = "[";
  for (size_t p = 0; p < named.size(); ++p) {
    char buf[128];
    std::snprintf(buf, sizeof buf, ",\"bytes\":%zu,\"ready_ms\":%.3f,\"ready_seq\":%d}",
                  named[p].second.nbytes(), median(ready[p]), clock->seq[p]);
    list += p ? ",{\"name\":" : "{\"name\":";
    list += json_string(named[p].first);
    list += buf;
  }
  list += "]";
  std::string buffers = "[";
  for (const ls::Tensor& b : wl.module->buffers()) {
    if (buffers.size() > 1) buffers += ',';
    buffers += std::to_string(b.nbytes());
  }
  buffers += "]";
  std::printf("{\"bench\":\"grad_ready\",\"summary\":true,\"model\":\"%s\",\"batch\":%lld,%s,"
              "\"threads\":%d,\"iters\":%d,\"num_params\":%zu,\"fwd_ms\":%.3f,\"bwd_ms\":%.3f,"
              "\"opt_ms\":%.3f,\"copy_gbps\":%.3f,\"buffer_bytes\":%s,\"params\":%s}\n",
              o.model.model.c_str(), static_cast<long long>(o.model.batch), wl.shape_json.c_str(),
              o.threads, o.iters, named.size(), median(fwd), median(bwd), median(opt),
              copy_gbps(params), buffers.c_str(), list.c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ls::cli::run("bench_grad_ready", [&] { return run_main(argc, argv); });
}
