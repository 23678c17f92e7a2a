// bench/bench_ddp.cpp — per-iteration latency of data-parallel training, ResNet or BERT,
// with DDP (overlapped or not), one flat AllReduce after backward, or no communication:
// the program behind the paper's Figures 6-10 and 12 (bench/figures/).
//
//   build/bin/lockstep-run --nproc-per-node 2 -- build/bin/bench_ddp --model resnet18 --image 64
//       --batch 4 --iters 5 --mode ddp [--bucket-mb 25] [--first-bucket-mb 1]
//       [--backend gloo|mpi|nccl] [--rr 1] [--sync-every 1] [--threads 1] [--warmup 1]
//       [--broadcast-buffers 1] [--sync-bn 1] [--deterministic 0|1]
//       [--bucket-view 0|1] [--static-graph 0|1] [--find-unused 0|1] [--rebuild-buckets 0|1]
//       [--device cpu|cuda] [--optimizer sgd|adamw] [--zero 0|1|2] [--zero-overlap 0|1] [--zero-split-mb MB]
//       [--zero-pieces -1|0|1] [--zero-broadcast-group 0|1] [--zero-defer 0|1]
//   mpirun -np 2 build/bin/bench_ddp --backend mpi ...
//   build/bin/bench_ddp ...                 (no launcher: one process, world 1)
// Model flags (--model --batch --image --seq --layers) as bench_step (bench/bench_models.h).
//
// Modes (all ranks run the same model on the same fixed batch of size --batch):
//   local       no communication: one replica's compute (the baseline);
//   ddp         DistributedDataParallel, AllReduce overlapped with backward;
//   no-overlap  DistributedDataParallel with DDPOptions().overlap(false): every bucket's
//               AllReduce is launched at the end of backward (the paper's baseline);
//   flat        the bare model; after backward one AllReduce of all gradients
//               concatenated into one buffer, then the averages are copied back into
//               .grad (like bench/torch/ddp.py --mode flat, which skips the copy-back).
// --bucket-mb auto: DDPOptions().autotune_buckets(true) picks bucket_cap_mb and
// first_bucket_mb at construction (Note [Bucket autotuning]); the summary reports the
// choice as bucket_mb / first_bucket_mb and bucket_autotuned true.
// --deterministic 1: DDPOptions().deterministic(true), AllGather + rank-ordered sum
// instead of AllReduce (Note [Deterministic reduction]).
// --bucket-view, --static-graph, --find-unused, --rebuild-buckets: the DDPOptions
// gradient_as_bucket_view, static_graph, find_unused_parameters, rebuild_buckets
// (defaults 0, 0, 0, 1 as in DDPOptions; docs/ddp.md sections 5, 6, 10).
// --optimizer sgd|adamw (SGD lr 0.01 momentum 0.9, or AdamW lr 1e-4 wd 0.01); --zero 1 shards
// its state with ZeroRedundancyOptimizer, --zero-overlap 1 steps the shards from DDP's
// Reducer bucket by bucket (hook_with_zero_step; --mode ddp/no-overlap only). --zero 2
// shards the gradients too (ZeroOptions().shard_gradients(true): each gradient reduced
// only to its owner, buckets freed after backward; always overlapped). --zero-split-mb MB:
// parameters above MB are sliced over every rank (ZeroOptions().split_parameters_mb;
// default -1: the optimizer's, 32 with the overlap, 0 without; Note [ZeRO split parameters]). With the overlap,
// --zero-broadcast-group 0|1 (default 1): the updated parameters broadcast on a second Gloo
// group (Note [ZeRO broadcast group]); --zero-pieces -1|0|1 (default -1: on with that group):
// buckets handed over piece by piece as they are reduced (Note [Handing a bucket over in
// pieces]). --zero-defer 0|1 (default 1): step() leaves each layer to wait for its parameters'
// broadcasts in the next forward (ZeroOptions().defer_broadcast_waits, register_forward_waits;
// 0: step() waits for them all; Note [ZeRO broadcasts overlap the next forward]). The summary adds
// opt_state_mb_per_rank and peak_rss_mb_per_rank (arrays, one entry per rank).
// --rr K wraps K process groups in ProcessGroupRoundRobin (paper Section 3.3, Figure 12).
// --sync-every S: gradient accumulation, paper Section 3.2.4: S-1 of every S iterations
// run forward and backward under ddp.no_sync() (flat: skip the AllReduce), the S-th syncs
// and takes the optimizer step (SGD lr 0.01 momentum 0.9; zero_grad after each step).
// Warm-up iterations always sync, so --iters a multiple of S times whole cycles.
// --device cuda (default with --backend nccl): the model, input and labels move to
// cuda:(LOCAL_RANK mod devices) (with nccl, the group's device). With gloo the CUDA
// buckets are staged through pinned host memory (Note [Gloo with CUDA tensors]).
// Timing on a GPU: the device is synchronised before t0, after forward, at the end of
// backward compute (inside the backward-clock callback, so bwd_ms is the GPU's compute
// and the AllReduces already launched keep running on NCCL's stream) and after the step;
// the summary adds device and cuda_peak_mb (the largest caching-allocator peak of any rank).
//
// Timing of one iteration (every rank; rank 0 prints). Before it, an untimed barrier
// lines the ranks up, as torch_ddp.py does. Then
//   fwd_ms        forward + loss (DDP: buffer broadcast, fingerprint and arming included);
//   bwd_ms        backward COMPUTE: from loss.backward() to the end of the last autograd
//                 node, DDP's gradient hooks (copy into buckets, launches) included;
//   comm_wait_ms  from the end of backward compute until every gradient is averaged in
//                 .grad: DDP's finalize (wait for the buckets, copy out; with no-overlap
//                 also every launch) or the flat AllReduce; local: ~0;
//   opt_ms        optimizer step + zero_grad (0 on no_sync iterations);
//   opt_tail_ms   the optimizer's time after the last bucket was reduced: opt_ms, except with
//                 --zero-overlap 1, where it runs from the last bucket's reduction (its shard
//                 step runs then) to the end of step() (the broadcast wait); per
//                 iteration the largest of the ranks' (the summary's median is over those);
//   opt_tail_step_ms  of that, the optimizer's own work: with --zero-overlap 1 the last
//                 bucket's shard step (its broadcasts started, not waited for), largest rank;
//                 otherwise opt_ms;
//   iter_ms       all four.
// § Note [Backward clock]
// How the end of backward compute is seen: the loss passes through an identity op
// whose backward node (the first to run in every backward) queues an autograd callback
// that reads the clock. Callbacks run in queue order after the last node, and DDP queues
// its finalize_backward from its first gradient hook, later: so the clock is read right
// after the last node, before DDP's wait. A hook on the parameters would do the same, but a
// post-accumulate-grad hook of anyone but DDP turns DDP's gradient sinks off (Note
// [Gradient sinks], autograd/accumulate_grad.h), and the benchmark would time a DDP no
// user runs.
//
// Output: one JSON line per iteration from rank 0 (warm-up ones marked), then a summary
// line: medians of iter/fwd/bwd/comm_wait/opt ms over the timed iterations, mean_iter_ms,
// examples_per_s = world * batch * iters / (the slowest rank's total timed seconds),
// buckets (DDP's bucket count) and bucket_sizes_mb (each bucket's MB in launch order, as
// DDP holds them at the end of the run), gradients_placed (how many gradients DDP's gradient
// sinks wrote straight into their bucket slots over the run, rank 0; Note [Gradient sinks]),
// peak_rss_mb (the largest peak resident set of any rank, getrusage ru_maxrss, over the whole
// run) and replicas_equal (a float64 checksum of the parameters is the same on every rank
// after the run).
//
// Read before: bench/bench_models.h, distributed/ddp/distributed_data_parallel.h, docs/ddp.md.
// Read next: bench/figures/README.md, docs/results/evaluation.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <sys/resource.h>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "bench/bench_device.h"
#include "bench/bench_models.h"
#include "bench/bench_process_group.h"
#include "bench/bench_stats.h"
#include "core/factory.h"
#include "core/autocast.h"
#include "core/grad_mode.h"
#include "core/parallel.h"
#include "distributed/distributed.h"
#include "bench/bench_optimizer.h"
#include "bench/flat_reducer.h"
#include "optim/sgd.h"
#include "tools/cli.h"
#if LOCKSTEP_WITH_CUDA
#include "core/cuda/cuda_allocator.h"
#include "core/cuda/cuda_context.h"
#endif

namespace {

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using Clock = std::chrono::steady_clock;

struct Options {
  ls::bench::ModelOptions model;
  int iters = 5, warmup = 1, threads = 1, rr = 1, sync_every = 1;
  std::string mode = "ddp", backend = "gloo";
  std::string device;  // cpu | cuda; empty: cuda with nccl, else cpu
  std::string amp = "off";  // bf16: forward + loss under ls::AutocastGuard (Note [Autocast policy])
  double bucket_mb = 25.0, first_bucket_mb = 1.0;
  bool broadcast_buffers = true;
  bool autotune = false;       // --bucket-mb auto
  bool deterministic = false;  // --deterministic 1
  bool sync_bn = false;  // --sync-bn 1: convert_sync_batchnorm (distributed/ddp/sync_batch_norm.h)
  bool bucket_view = false, static_graph = false, find_unused = false, rebuild = true;
  std::string optimizer = "sgd";  // bench/bench_optimizer.h
  int zero = 0;
  bool zero_overlap = false;
  double zero_split_mb = -1;  // -1: ZeroOptions' default (kAutoSplitMB with the overlap, else 0)
  int zero_pieces = -1;  // -1: ZeroOptions' default (on with a broadcast group of its own)
  bool zero_broadcast_group = true;
  bool zero_defer = true;
};

Options parse(int argc, char** argv) {
  Options o;
  o.model.batch = 4;
  std::string bucket_mb = "25";
  ls::cli::Program p("bench_ddp", "Per-iteration latency of data-parallel training (DDP, no-overlap, flat "
                                  "AllReduce or local), under lockstep-run or mpirun; JSON lines, the last a summary.");
  ls::bench::add_model_options(p, o.model);
  ls::bench::add_timing_options(p, o.iters, o.warmup, o.threads);
  p.choice("--mode", o.mode, "what communicates (see the file header)", {"local", "ddp", "no-overlap", "flat"});
  p.choice("--backend", o.backend, "process group backend", {"gloo", "mpi", "nccl"});
  p.app()
      .add_option("--bucket-mb", bucket_mb, "DDP bucket_cap_mb (>= 0), or 'auto' to autotune the buckets")
      ->check(CLI::Validator(
          [](std::string& t) {
            const auto v = ls::cli::parse_real(t);
            return t == "auto" || (v && *v >= 0) ? std::string() : "expected a number >= 0 or 'auto', got '" + t + "'";
          },
          "", "bucket-mb"))
      ->type_name("MB|auto");
  p.real("--first-bucket-mb", o.first_bucket_mb, "DDP first_bucket_mb", 0.0, 1e6);
  p.switch01("--deterministic", o.deterministic, "DDPOptions().deterministic");
  p.integer("--rr", o.rr, "process groups used round-robin", 1, 64);
  p.integer("--sync-every", o.sync_every, "sync (and step) every S iterations, no_sync between", 1, 1000000);
  p.switch01("--broadcast-buffers", o.broadcast_buffers, "DDPOptions().broadcast_buffers");
  p.switch01("--sync-bn", o.sync_bn, "convert BatchNorm2d to SyncBatchNorm");
  p.switch01("--bucket-view", o.bucket_view, "DDPOptions().gradient_as_bucket_view");
  p.switch01("--static-graph", o.static_graph, "DDPOptions().static_graph");
  p.switch01("--find-unused", o.find_unused, "DDPOptions().find_unused_parameters");
  p.switch01("--rebuild-buckets", o.rebuild, "DDPOptions().rebuild_buckets");
  p.choice("--device", o.device, "cpu or cuda (default: cuda with nccl, else cpu)", {"cpu", "cuda"})->default_str("");
  p.choice("--amp", o.amp, "mixed precision: bf16 runs forward + loss under ls::AutocastGuard; "
           "gradients stay float32 and reduce as before", {"off", "bf16"});
  p.choice("--optimizer", o.optimizer, "the optimizer (bench/bench_optimizer.h)", {"sgd", "adamw"});
  p.integer("--zero", o.zero, "ZeRO stage: 0 plain, 1 sharded optimizer state (ZeroRedundancyOptimizer), "
            "2 sharded gradients too (always overlapped with DDP)", 0, 2);
  p.switch01("--zero-overlap", o.zero_overlap, "with --zero 1: step each bucket's shard from DDP (hook_with_zero_step)");
  p.real("--zero-split-mb", o.zero_split_mb, "with --zero 1|2: ZeroOptions().split_parameters_mb, parameters above "
         "this size sliced over every rank (0: none; -1: its default, 32 with the overlap, 0 without)", -1.0, 1e6);
  p.integer("--zero-pieces", o.zero_pieces, "with the overlap: ZeroOptions().hand_over_in_pieces, each bucket "
            "reduced in pieces and stepped piece by piece as they arrive (-1: its default, on with a broadcast "
            "group of its own)", -1, 1);
  p.switch01("--zero-broadcast-group", o.zero_broadcast_group, "with the overlap: ZeroOptions().own_broadcast_group, "
             "the updated parameters broadcast on a second Gloo group");
  p.switch01("--zero-defer", o.zero_defer, "with --zero 1|2: ZeroOptions().defer_broadcast_waits, each layer "
             "waiting for its parameters' broadcasts in the next forward (0: step() waits for all)");
  p.parse(argc, argv);
  ls::bench::check_model_options(p, o.model);
  if (o.zero == 2) {
    if (o.mode != "ddp" && o.mode != "no-overlap") {
      p.usage_error("--zero 2 needs --mode ddp or no-overlap (its gradients are sharded by DDP's Reducer)");
    }
    if (o.bucket_view || o.deterministic) {
      p.usage_error("--zero 2 reduces each gradient to its owner and frees the buckets: it refuses "
                    "--bucket-view 1 and --deterministic 1 (use --zero 1 with them)");
    }
    o.zero_overlap = true;  // ZeRO-2 is the overlapped form
  }
  // The --zero-* options tune ZeRO: given without --zero they would be silently ignored.
  for (const char* flag : {"--zero-defer", "--zero-split-mb", "--zero-pieces", "--zero-broadcast-group"}) {
    if (o.zero == 0 && p.app().get_option(flag)->count() > 0) {
      p.usage_error(std::string(flag) + " tunes ZeroRedundancyOptimizer: it needs --zero 1 or 2");
    }
  }
  if (o.zero_overlap && (o.zero == 0 || (o.mode != "ddp" && o.mode != "no-overlap"))) {
    p.usage_error("--zero-overlap 1 needs --zero 1 and --mode ddp or no-overlap (it steps from DDP's Reducer)");
  }
  o.autotune = bucket_mb == "auto";
  if (!o.autotune) o.bucket_mb = *ls::cli::parse_real(bucket_mb);
  if (o.device.empty()) o.device = o.backend == "nccl" ? "cuda" : "cpu";
  if (o.device == "cuda" && !ls::cuda::is_available()) {
    p.usage_error("--device cuda: no CUDA device (this build has no CUDA backend, or no GPU is visible)");
  }
  if (o.backend == "nccl" && o.device != "cuda") p.usage_error("--backend nccl needs --device cuda");
  // A launcher's variables must make sense (the same checks as train_fashion_mnist's): exit 2.
  p.environment([] { return ls::distributed::launched_world_size(); });
  if (std::getenv("RANK") != nullptr && o.backend != "mpi") p.environment([] { return dist::resolve_rendezvous(); });
  return o;
}

using ls::bench::device_sync;  // bench/bench_device.h

// This rank's device: cuda:(LOCAL_RANK mod visible devices), made current, or the CPU.
ls::Device pick_device(const Options& o) {
  if (o.device != "cuda") return ls::Device::cpu();
  const char* local = std::getenv("LOCAL_RANK");
  if (local == nullptr) local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  const int index = (local != nullptr ? std::atoi(local) : 0) % ls::cuda::device_count();
#if LOCKSTEP_WITH_CUDA
  ls::cuda::set_device(index);
#endif
  return ls::Device::cuda(index);
}

// Note [Backward clock]: see the file header.
struct BackwardClock {
  Clock::time_point compute_end;
  bool queued = false;
};

// The identity on the loss whose backward queues the clock's callback.
struct BackwardClockNode final : ls::autograd::Node {
  std::weak_ptr<BackwardClock> clock;
  ls::Device device = ls::Device::cpu();
  ls::autograd::variable_list apply(ls::autograd::variable_list&& grads) override {
    if (auto c = clock.lock()) {
      c->queued = true;
      ls::autograd::queue_callback([weak = clock, dev = device] {
        device_sync(dev);  // on a GPU: the end of backward's kernels, not of their queueing
        if (auto c2 = weak.lock()) c2->compute_end = Clock::now();
      });
    }
    return std::move(grads);
  }
  std::string name() const override { return "BackwardClock"; }
};

// `loss`, through the clock's identity node (a new 0-dim tensor with the same value).
ls::Tensor clocked(const ls::Tensor& loss, const std::shared_ptr<BackwardClock>& clock, ls::Device device) {
  ls::Tensor out = loss.detach().clone();
  if (ls::autograd::compute_requires_grad({loss})) {
    auto node = std::make_shared<BackwardClockNode>();
    node->clock = clock;
    node->device = device;
    ls::autograd::record(node, {loss}, {out});
  }
  return out;
}

double ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

using lockstep::bench::median;  // bench/bench_stats.h

// One float64 number per rank that differs when the replicas' parameters do.
double parameter_checksum(const std::vector<ls::Tensor>& params) {
  double sum = 0.0;
  for (const ls::Tensor& p : params) {
    ls::Tensor c = p.to(ls::Device::cpu()).contiguous();
    const float* d = c.data_ptr<float>();
    for (int64_t i = 0; i < c.numel(); ++i) sum += static_cast<double>(d[i]) * (1.0 + (i % 7));
  }
  return sum;
}

double allreduce_scalar(dist::ProcessGroup& pg, double v, dist::ReduceOp op) {
  ls::Tensor t = ls::full({1}, v, ls::TensorOptions().dtype(ls::kFloat64));
  pg.allreduce(t, op)->wait(pg.timeout());
  return t.item<double>();
}

struct Times {
  std::vector<double> iter, fwd, bwd, comm, opt, tail, tail_step;
};

template <class M>
int run(const Options& o, ls::bench::Workload& wl, std::shared_ptr<M> net,
        std::shared_ptr<dist::ProcessGroup> pg, ls::Device device) {
  const int rank = pg->rank(), world = pg->size();
  const std::vector<ls::Tensor> params = wl.module->parameters();
  auto backward_clock = std::make_shared<BackwardClock>();  // Note [Backward clock]

  const bool use_ddp = o.mode == "ddp" || o.mode == "no-overlap";
  std::unique_ptr<dist::DistributedDataParallel<M>> ddp;
  if (use_ddp) {
    ddp = std::make_unique<dist::DistributedDataParallel<M>>(
        net, pg,
        dist::DDPOptions()
            .bucket_cap_mb(o.bucket_mb)
            .first_bucket_mb(o.first_bucket_mb)
            .broadcast_buffers(o.broadcast_buffers)
            .overlap(o.mode == "ddp")
            .autotune_buckets(o.autotune)
            .deterministic(o.deterministic)
            .gradient_as_bucket_view(o.bucket_view)
            .static_graph(o.static_graph)
            .find_unused_parameters(o.find_unused)
            .rebuild_buckets(o.rebuild));
  }
  std::unique_ptr<ls::bench::FlatReducer> flat;
  if (o.mode == "flat") flat = std::make_unique<ls::bench::FlatReducer>(params, device);
#if LOCKSTEP_WITH_CUDA
  if (device.is_cuda()) ls::cuda::reset_peak_memory_stats(device.index);
#endif
  auto zo = dist::ZeroOptions().own_broadcast_group(o.zero_broadcast_group).defer_broadcast_waits(o.zero_defer);
  if (o.zero_split_mb >= 0) zo.split_parameters_mb(o.zero_split_mb);
  if (o.zero_pieces >= 0) zo.hand_over_in_pieces(o.zero_pieces == 1);
  ls::bench::BenchOptimizer opt = ls::bench::make_bench_optimizer(o.optimizer, o.zero, o.zero_overlap, params, pg, zo);
  const bool zero_pieces = opt.zero && opt.zero->hands_over_in_pieces();
  const bool zero_group = opt.zero && opt.zero->has_own_broadcast_group();
  const double zero_split_mb = opt.zero ? opt.zero->split_parameters_mb() : 0.0;
  if (o.zero_overlap) dist::hook_with_zero_step(*ddp, *opt.zero);  // with the forward waits
  else if (opt.zero && o.zero_defer) opt.zero->register_forward_waits(*wl.module);

  Times t;
  double timed_s = 0.0;
  for (int i = 0; i < o.warmup + o.iters; ++i) {
    // Warm-up iterations always sync; timed ones count cycles of --sync-every from 0.
    const bool sync = i < o.warmup || (i - o.warmup + 1) % o.sync_every == 0;
    device_sync(device);
    if (world > 1) pg->barrier()->wait(pg->timeout());
    const auto t0 = Clock::now();
    ls::Tensor loss;
    Clock::time_point t1, t2;
    auto forward_backward = [&] {
      {
        ls::AutocastGuard amp(ls::kBFloat16, o.amp == "bf16");
        loss = clocked(wl.loss_of(ddp ? ddp->forward(wl.input) : net->forward(wl.input)), backward_clock, device);
      }
      device_sync(device);
      t1 = Clock::now();
      backward_clock->queued = false;
      loss.backward();
      device_sync(device);  // DDP's finalize has made the compute stream wait for every bucket
      t2 = Clock::now();
    };
    if (ddp && !sync) {
      auto guard = ddp->no_sync();
      forward_backward();
    } else {
      forward_backward();
    }
    const auto compute_end = backward_clock->queued ? backward_clock->compute_end : t2;
    if (flat && sync) {
      flat->reduce(*pg);
      device_sync(device);
      t2 = Clock::now();
    }
    if (sync) {
      opt.opt->step();
      opt.opt->zero_grad();
    }
    device_sync(device);
    const auto t3 = Clock::now();
    const bool warm = i < o.warmup;
    const double it = ms(t0, t3), f = ms(t0, t1), b = ms(t1, compute_end),
                 c = ms(compute_end, t2), u = ms(t2, t3);
    if (rank == 0) {
      std::printf(
          "{\"bench\":\"ddp\",\"iter\":%d,\"warmup\":%s,\"sync\":%s,\"iter_ms\":%.2f,"
          "\"fwd_ms\":%.2f,\"bwd_ms\":%.2f,\"comm_wait_ms\":%.2f,\"opt_ms\":%.2f,\"loss\":%.5f}\n",
          i, warm ? "true" : "false", sync ? "true" : "false", it, f, b, c, u,
          loss.to(ls::Device::cpu()).item<float>());
      std::fflush(stdout);
    }
    if (warm) continue;
    t.iter.push_back(it);
    t.fwd.push_back(f);
    t.bwd.push_back(b);
    t.comm.push_back(c);
    t.opt.push_back(u);
    const bool overlapped = opt.zero && o.zero_overlap;
    t.tail.push_back(overlapped ? ms(opt.zero->last_bucket_reduced_at(), t3) : u);
    t.tail_step.push_back(
        overlapped ? ms(opt.zero->last_bucket_reduced_at(), opt.zero->last_bucket_stepped_at()) : u);
    timed_s += it * 1e-3;
  }

  // The tail ends when the slowest rank has its parameters: the largest of the ranks', per iteration.
  for (double& tail : t.tail) tail = allreduce_scalar(*pg, tail, dist::ReduceOp::MAX);
  for (double& step : t.tail_step) step = allreduce_scalar(*pg, step, dist::ReduceOp::MAX);
  const double slowest_s = allreduce_scalar(*pg, timed_s, dist::ReduceOp::MAX);
  if (opt.zero) opt.zero->wait_for_broadcasts();  // the checksum reads them outside a forward
  const double sum = parameter_checksum(params);
  const bool equal = allreduce_scalar(*pg, sum, dist::ReduceOp::MAX) ==
                     allreduce_scalar(*pg, sum, dist::ReduceOp::MIN);
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);  // ru_maxrss: peak resident set, KB on Linux
  const double peak_rss_mb =
      allreduce_scalar(*pg, static_cast<double>(usage.ru_maxrss) / 1024.0, dist::ReduceOp::MAX);
  double cuda_peak = 0.0;  // MB, this rank's caching-allocator peak since the loop began
#if LOCKSTEP_WITH_CUDA
  if (device.is_cuda()) cuda_peak = static_cast<double>(ls::cuda::memory_stats(device.index).peak_allocated_bytes) / (1 << 20);
#endif
  const double cuda_peak_mb = allreduce_scalar(*pg, cuda_peak, dist::ReduceOp::MAX);
  const std::string rss_per_rank = ls::bench::per_rank_json(*pg, static_cast<double>(usage.ru_maxrss) / 1024.0);
  const std::string state_per_rank = ls::bench::per_rank_json(*pg, ls::bench::optimizer_state_mb(opt));
  std::string bucket_sizes = "[";  // MB per bucket, in launch order (after any rebuild)
  for (size_t b = 0; ddp && b < ddp->reducer().num_buckets(); ++b) {
    const dist::Bucket& bucket = ddp->reducer().buckets()[b];  // its flat is freed between iterations under --zero 2
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.2f", b ? "," : "",
                  static_cast<double>(bucket.numel() * static_cast<int64_t>(ls::element_size(bucket.dtype))) / (1 << 20));
    bucket_sizes += buf;
  }
  bucket_sizes += "]";
  if (rank == 0) {
    const double mean = std::accumulate(t.iter.begin(), t.iter.end(), 0.0) / t.iter.size();
    std::printf(
        "{\"bench\":\"ddp\",\"summary\":true,\"framework\":\"lockstep\",\"model\":\"%s\","
        "\"batch\":%lld,%s,\"mode\":\"%s\",\"backend\":\"%s\",\"world\":%d,\"rr\":%d,"
        "\"bucket_mb\":%g,\"first_bucket_mb\":%g,\"bucket_autotuned\":%s,\"deterministic\":%s,\"sync_every\":%d,\"threads\":%d,\"iters\":%d,"
        "\"params\":%lld,\"buckets\":%zu,\"bucket_sizes_mb\":%s,\"gradients_placed\":%lld,\"iter_ms\":%.2f,\"mean_iter_ms\":%.2f,\"fwd_ms\":%.2f,"
        "\"bwd_ms\":%.2f,\"comm_wait_ms\":%.2f,\"opt_ms\":%.2f,\"examples_per_s\":%.2f,"
        "\"sync_bn\":%s,\"bucket_view\":%s,\"static_graph\":%s,\"find_unused\":%s,"
        "\"rebuild_buckets\":%s,\"peak_rss_mb\":%.1f,\"replicas_equal\":%s,\"device\":\"%s\","
        "\"amp\":\"%s\",\"cuda_peak_mb\":%.1f,\"optimizer\":\"%s\",\"zero\":%d,\"zero_overlap\":%s,\"zero_split_mb\":%g,"
        "\"zero_pieces\":%s,\"zero_broadcast_group\":%s,\"zero_defer\":%s,\"opt_tail_ms\":%.2f,\"opt_tail_step_ms\":%.2f,\"opt_state_mb_per_rank\":%s,\"peak_rss_mb_per_rank\":%s}\n",
        o.model.model.c_str(), static_cast<long long>(o.model.batch), wl.shape_json.c_str(),
        o.mode.c_str(), o.backend.c_str(), world, o.rr, ddp ? ddp->options().bucket_cap_mb() : o.bucket_mb,
        ddp ? ddp->options().first_bucket_mb() : o.first_bucket_mb, o.autotune ? "true" : "false",
        o.deterministic ? "true" : "false",
        o.sync_every, o.threads, o.iters, static_cast<long long>(wl.num_parameters()),
        ddp ? ddp->reducer().num_buckets() : size_t{0}, bucket_sizes.c_str(),
        static_cast<long long>(ddp ? ddp->reducer().gradients_placed() : 0), median(t.iter), mean, median(t.fwd),
        median(t.bwd), median(t.comm), median(t.opt),
        static_cast<double>(world) * o.model.batch * o.iters / slowest_s,
        o.sync_bn ? "true" : "false", o.bucket_view ? "true" : "false",
        o.static_graph ? "true" : "false", o.find_unused ? "true" : "false",
        o.rebuild ? "true" : "false", peak_rss_mb, equal ? "true" : "false", o.device.c_str(), o.amp.c_str(), cuda_peak_mb,
        o.optimizer.c_str(), o.zero, o.zero_overlap ? "true" : "false", zero_split_mb,
        zero_pieces ? "true" : "false", zero_group ? "true" : "false", opt.zero && o.zero_defer ? "true" : "false", median(t.tail), median(t.tail_step), state_per_rank.c_str(), rss_per_rank.c_str());
    std::fflush(stdout);
  }
  // Replicas that drifted apart under DDP or flat averaging are a bug: fail the run.
  return equal || o.mode == "local" ? 0 : 3;
}

int run_main(int argc, char** argv) {
  Options o = parse(argc, argv);
  ls::set_num_threads(o.threads);
  const ls::Device device = pick_device(o);  // before the group: NCCL uses the current device
  auto pg = ls::bench::make_process_group(o.backend, o.rr);
  ls::bench::Workload wl = ls::bench::make_workload(o.model);
  if (device.is_cuda()) {  // built on the CPU (same seed on every rank), then moved
    wl.module->to(device);
    wl.input = wl.input.to(device);
    wl.labels = wl.labels.to(device);
  }
  if (o.sync_bn) dist::convert_sync_batchnorm(wl.module, pg);  // BatchNorm2d statistics over the group
  return ls::bench::visit_net(wl, [&](auto net) { return run(o, wl, net, pg, device); });
}

}  // namespace

int main(int argc, char** argv) {
  return ls::cli::run("bench_ddp", [&] { return run_main(argc, argv); });
}
