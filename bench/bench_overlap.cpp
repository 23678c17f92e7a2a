// bench/bench_overlap.cpp — the modes of bench_ddp (local, flat, no-overlap, ddp, and
// ddp-view: ddp with gradients as bucket views; ddp-copy: ddp with the plain copy back
// into .grad, LOCKSTEP_DDP_COPY_OUT_BY_REFERENCE=0, so the plain copy in too; ddp-nosink:
// ddp without its gradient sinks, LOCKSTEP_DDP_GRAD_SINKS=0; ddp-nochecks: ddp with every default
// check off, i.e. on a second process group that fingerprints only its first collective, without
// the non-finite gradient check and the replica check; ddp-nocollchecks: ddp on that second group
// only, its DDP checks on) INTERLEAVED in one process, so that a
// machine whose speed drifts from second to second (a shared host) slows every mode
// alike. Each mode trains its own replica of the model (built from the same seed); one
// cycle runs one iteration of every mode, starting one mode later each cycle.
//
//   build/bin/lockstep-run --nproc-per-node 2 -- build/bin/bench_overlap --model resnet50
//       --batch 4 --cycles 8 [--modes local,flat,no-overlap,ddp] [--amp bf16]
//       (the checks' cost: --modes ddp,ddp-nochecks,ddp-nocollchecks; see ddp_over_ddp-nochecks)
//       [--bucket-mb 25] [--first-bucket-mb 1] [--threads 1] [--warmup 1] [--backend gloo|mpi]
//
// What a mode's iteration is, and its timing (rank 0's wall clock, after a barrier), are
// bench_ddp's (bench/bench_ddp.cpp: forward + loss, backward, the flat AllReduce or
// DDP's finalize, SGD step + zero_grad). Output: one JSON line per timed iteration
// ({"bench":"overlap","cycle":c,"mode":m,"iter_ms":...} and its phases fwd_ms, bwd_ms with
// DDP's finalize, reduce_ms (flat's AllReduce), opt_ms), then a summary line: per mode
// the median ms and "<mode>_phases_ms" (the four phases' medians); per mode other than local the median over cycles of its iteration
// divided by local's in the same cycle ("<mode>_over_local"); per ddp-* mode run beside ddp,
// "ddp_over_<mode>" and its quartiles "ddp_over_<mode>_q" (ddp / that mode within a cycle: what
// ddp's defaults cost, e.g. ddp_over_ddp-nochecks); and "hidden", the median
// over cycles of (flat - ddp) / (flat - local) when flat and ddp both ran. Ratios taken
// within a cycle are what this program is for: iterations seconds apart see the same
// machine. Memory: one model, its gradients, optimizer state and buckets per mode.
//
// Read before: bench/bench_ddp.cpp. Read next: bench/compare_overlap.sh, bench/collective_checks.sh.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_models.h"
#include "bench/bench_process_group.h"
#include "bench/bench_stats.h"
#include "bench/flat_reducer.h"
#include "core/autocast.h"
#include "core/parallel.h"
#include "distributed/distributed.h"
#include "optim/sgd.h"
#include "tools/cli.h"

namespace {

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using Clock = std::chrono::steady_clock;

struct Options {
  ls::bench::ModelOptions model;
  int cycles = 8, warmup = 1, threads = 1;
  std::string modes = "local,flat,no-overlap,ddp", backend = "gloo", amp = "off";
  double bucket_mb = 25.0, first_bucket_mb = 1.0;
};

const std::vector<std::string> kModes = {"local",    "flat",       "no-overlap",   "ddp",
                                         "ddp-view", "ddp-copy",   "ddp-nosink",   "ddp-nochecks",
                                         "ddp-nocollchecks"};
const char* const kModeList =
    "local,flat,no-overlap,ddp,ddp-view,ddp-copy,ddp-nosink,ddp-nochecks,ddp-nocollchecks";

std::vector<std::string> split_modes(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string m; std::getline(in, m, ',');) out.push_back(m);
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  o.model.batch = 4;
  ls::cli::Program p("bench_overlap", "bench_ddp's modes interleaved in one process (one iteration of each "
                                      "per cycle), under lockstep-run or mpirun; JSON lines, the last a summary.");
  ls::bench::add_model_options(p, o.model);
  p.integer("--cycles", o.cycles, "timed cycles (one iteration of every mode each)", 1, 100000);
  p.integer("--warmup", o.warmup, "untimed cycles first", 0, 1000);
  p.threads(o.threads);
  p.text("--modes", o.modes, std::string("comma-separated subset of ") + kModeList);
  p.choice("--backend", o.backend, "process group backend", {"gloo", "mpi"});
  p.choice("--amp", o.amp, "bf16: forward + loss under ls::AutocastGuard", {"off", "bf16"});
  p.real("--bucket-mb", o.bucket_mb, "DDP bucket_cap_mb", 0.0, 1e6);
  p.real("--first-bucket-mb", o.first_bucket_mb, "DDP first_bucket_mb", 0.0, 1e6);
  p.parse(argc, argv);
  ls::bench::check_model_options(p, o.model);
  const std::vector<std::string> modes = split_modes(o.modes);
  if (modes.empty()) p.usage_error(std::string("--modes: give at least one of ") + kModeList);
  for (size_t i = 0; i < modes.size(); ++i) {
    if (std::find(kModes.begin(), kModes.end(), modes[i]) == kModes.end()) {
      p.usage_error("--modes: '" + modes[i] + "' is not one of " + kModeList);
    }
    for (size_t j = 0; j < i; ++j) {
      if (modes[j] == modes[i]) p.usage_error("--modes: '" + modes[i] + "' is given twice");
    }
  }
  p.environment([] { return dist::launched_world_size(); });
  if (std::getenv("RANK") != nullptr && o.backend != "mpi") p.environment([] { return dist::resolve_rendezvous(); });
  return o;
}

// Where one iteration's time went, ms: forward + loss; backward (DDP's finalize, i.e. the
// wait for the buckets and the copy-out, included); flat's AllReduce; step + zero_grad.
struct Phases {
  double fwd = 0, bwd = 0, reduce = 0, opt = 0;
};

// One mode's replica and how to run one iteration of it.
struct Mode {
  std::string name;
  std::function<Phases()> iteration;
};

Mode make_mode(const std::string& name, const Options& o, const std::shared_ptr<dist::ProcessGroup>& pg) {
  ls::bench::ModelOptions mo = o.model;
  auto wl = std::make_shared<ls::bench::Workload>(ls::bench::make_workload(mo));  // same seed for every mode
  auto params = wl->module->parameters();
  auto opt = std::make_shared<ls::optim::SGD>(params, ls::optim::SGDOptions(0.01).momentum(0.9));
  const bool bf16 = o.amp == "bf16";
  return ls::bench::visit_net(*wl, [&](auto net) -> Mode {
    using M = typename decltype(net)::element_type;
    std::shared_ptr<dist::DistributedDataParallel<M>> ddp;
    std::shared_ptr<ls::bench::FlatReducer> flat;
    if (name == "flat") flat = std::make_shared<ls::bench::FlatReducer>(params, ls::Device::cpu());
    if (name != "local" && name != "flat") {
      // ddp-copy: the plain copy back into .grad (Note [Copy-out by reference]); ddp-nosink: no
      // gradient sinks (Note [Gradient sinks]); both read at construction
      if (name == "ddp-copy") setenv("LOCKSTEP_DDP_COPY_OUT_BY_REFERENCE", "0", 1);
      if (name == "ddp-nosink") setenv("LOCKSTEP_DDP_GRAD_SINKS", "0", 1);
      dist::DDPOptions options = dist::DDPOptions()
                                     .bucket_cap_mb(o.bucket_mb)
                                     .first_bucket_mb(o.first_bucket_mb)
                                     .overlap(name != "no-overlap")
                                     .gradient_as_bucket_view(name == "ddp-view");
      // ddp-nochecks: no non-finite gradient check (Note [Non-finite gradients]) and no
      // replica check (Note [Replica divergence check]); LOCKSTEP_NONFINITE and
      // LOCKSTEP_REPLICA_CHECK_EVERY, when set, still override both
      if (name == "ddp-nochecks") options.non_finite_gradients(dist::NonFinitePolicy::OFF).check_replicas_every(0);
      ddp = std::make_shared<dist::DistributedDataParallel<M>>(net, pg, options);
      unsetenv("LOCKSTEP_DDP_COPY_OUT_BY_REFERENCE");
      unsetenv("LOCKSTEP_DDP_GRAD_SINKS");
    }
    return Mode{name, [wl, net, ddp, flat, opt, pg, bf16] {
                  Phases p;
                  auto t = Clock::now();
                  auto lap = [&t](double& into) {
                    const auto now = Clock::now();
                    into = std::chrono::duration<double, std::milli>(now - t).count();
                    t = now;
                  };
                  ls::Tensor loss;
                  {
                    ls::AutocastGuard amp(ls::kBFloat16, bf16);
                    loss = wl->loss_of(ddp ? ddp->forward(wl->input) : net->forward(wl->input));
                  }
                  lap(p.fwd);
                  loss.backward();
                  lap(p.bwd);
                  if (flat) flat->reduce(*pg);
                  lap(p.reduce);
                  opt->step();
                  opt->zero_grad();
                  lap(p.opt);
                  return p;
                }};
  });
}

int run_main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  ls::set_num_threads(o.threads);
  auto pg = ls::bench::make_process_group(o.backend);
  const int rank = pg->rank();
  std::vector<Mode> modes;
  std::shared_ptr<dist::ProcessGroup> unchecked;  // ddp-nochecks' and ddp-nocollchecks' group
  for (const std::string& name : split_modes(o.modes)) {
    if (name == "ddp-nochecks" || name == "ddp-nocollchecks") {
      if (!unchecked) unchecked = ls::bench::make_unchecked_group(*pg, o.backend);
      modes.push_back(make_mode(name, o, unchecked));
    } else {
      modes.push_back(make_mode(name, o, pg));
    }
  }
  const size_t n = modes.size();
  std::map<std::string, std::vector<double>> times;  // mode -> ms per timed cycle
  std::map<std::string, std::vector<Phases>> phases;
  for (int c = 0; c < o.warmup + o.cycles; ++c) {
    const bool warm = c < o.warmup;
    for (size_t k = 0; k < n; ++k) {
      Mode& m = modes[(static_cast<size_t>(c) + k) % n];  // each cycle starts one mode later
      pg->barrier()->wait(pg->timeout());
      const Phases ph = m.iteration();
      const double it = ph.fwd + ph.bwd + ph.reduce + ph.opt;
      if (rank == 0) {
        std::printf("{\"bench\":\"overlap\",\"cycle\":%d,\"warmup\":%s,\"mode\":\"%s\",\"iter_ms\":%.2f,"
                    "\"fwd_ms\":%.2f,\"bwd_ms\":%.2f,\"reduce_ms\":%.2f,\"opt_ms\":%.2f}\n",
                    c - o.warmup, warm ? "true" : "false", m.name.c_str(), it, ph.fwd, ph.bwd, ph.reduce, ph.opt);
        std::fflush(stdout);
      }
      if (!warm) {
        times[m.name].push_back(it);
        phases[m.name].push_back(ph);
      }
    }
  }
  if (rank != 0) return 0;
  using ls::bench::median;
  std::string summary = "{\"bench\":\"overlap\",\"summary\":true,\"model\":\"" + o.model.model + "\",\"batch\":" +
                        std::to_string(o.model.batch) + ",\"world\":" + std::to_string(pg->size()) +
                        ",\"backend\":\"" + o.backend + "\",\"amp\":\"" + o.amp + "\",\"cycles\":" +
                        std::to_string(o.cycles);
  char buf[128];
  for (const Mode& m : modes) {
    std::vector<double> f, b, r, u;
    for (const Phases& p : phases[m.name]) {
      f.push_back(p.fwd);
      b.push_back(p.bwd);
      r.push_back(p.reduce);
      u.push_back(p.opt);
    }
    std::snprintf(buf, sizeof buf, ",\"%s_ms\":%.2f,\"%s_phases_ms\":[%.1f,%.1f,%.1f,%.1f]", m.name.c_str(),
                  median(times[m.name]), m.name.c_str(), median(f), median(b), median(r), median(u));
    summary += buf;
  }
  if (times.count("ddp")) {  // what ddp's defaults cost against each ddp-* mode, within a cycle
    for (const Mode& m : modes) {
      if (m.name.rfind("ddp-", 0) != 0) continue;
      std::vector<double> ratio;
      for (int c = 0; c < o.cycles; ++c) ratio.push_back(times["ddp"][c] / times[m.name][c]);
      std::snprintf(buf, sizeof buf, ",\"ddp_over_%s\":%.4f,\"ddp_over_%s_q\":[%.4f,%.4f]", m.name.c_str(),
                    median(ratio), m.name.c_str(), ls::bench::quantile(ratio, 0.25), ls::bench::quantile(ratio, 0.75));
      summary += buf;
    }
  }
  if (times.count("local")) {
    for (const Mode& m : modes) {
      if (m.name == "local") continue;
      std::vector<double> ratio;
      for (int c = 0; c < o.cycles; ++c) ratio.push_back(times[m.name][c] / times["local"][c]);
      std::snprintf(buf, sizeof buf, ",\"%s_over_local\":%.4f", m.name.c_str(), median(ratio));
      summary += buf;
    }
    if (times.count("flat") && times.count("ddp")) {
      std::vector<double> hidden;
      for (int c = 0; c < o.cycles; ++c) {
        const double f = times["flat"][c], d = times["ddp"][c], l = times["local"][c];
        if (f > l) hidden.push_back((f - d) / (f - l));
      }
      // null when flat never cost more than local (nothing to hide)
      if (hidden.empty()) std::snprintf(buf, sizeof buf, ",\"hidden\":null,\"hidden_cycles\":0");
      else std::snprintf(buf, sizeof buf, ",\"hidden\":%.4f,\"hidden_cycles\":%zu", median(hidden), hidden.size());
      summary += buf;
    }
  }
  std::printf("%s}\n", summary.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ls::cli::run("bench_overlap", [&] { return run_main(argc, argv); });
}
