// bench/bench_allreduce.cpp — the paper's Figure 2 on this machine: the time to
// AllReduce a fixed total of floats when it is split into calls of a given size.
//
// For each per-call size S: allocate total/S tensors of S floats, then (after a
// barrier) issue all their allreduces back to back — asynchronous, as DDP's
// buckets are — and wait for all. The median over --iters timed runs (after one
// warm-up run that also checks the sums) gives one JSON line per size: total
// ms, ms per call, and algorithm bandwidth (bytes reduced / time). The last
// line is a summary. Small sizes measure per-call overhead; large sizes measure
// bandwidth.
//
//   build/bin/lockstep-run --nproc-per-node 2 -- build/bin/bench_allreduce --backend gloo
//   mpirun -np 2 build/bin/bench_allreduce --backend mpi
//   options: --total 60000000 --sizes 10000,100000,1000000,10000000,60000000 --iters 3
//            --round-robin K (K groups, paper Figure 12) --collective-checks 0 (fingerprint only the
//            first call; default 1: every call, Note [Collective fingerprints]) --buffers 1 (the
//            tensors are views of one ProcessGroup::empty_buffer, as DDP's buckets are: Note
//            [Shared-memory buffers]; default 0: ordinary tensors)
//
// Read before: distributed/process_group/process_group.h,
// distributed/process_group/process_group_gloo.h.
// Read next: bench/compare_allreduce.sh, docs/results/allreduce.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "tools/cli.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "distributed/init.h"
#include "distributed/store/prefix_store.h"
#include "distributed/process_group/process_group_gloo.h"
#include "distributed/process_group/process_group_mpi.h"
#include "distributed/process_group/process_group_round_robin.h"
#include "bench/bench_stats.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;

namespace {

struct Args {
  std::string backend = "gloo";
  int64_t total = 60000000;
  std::vector<int64_t> sizes = {10000, 100000, 1000000, 10000000, 60000000};
  int iters = 3;
  int round_robin = 1;
  int buffers = 0;
};

Args parse(int argc, char** argv) {
  Args a;
  int collective_checks = 1;
  ls::cli::Program p("bench_allreduce", "The paper's Figure 2: the time to AllReduce --total floats split into calls "
                                        "of each --sizes size; run it under lockstep-run or mpirun. JSON lines.");
  p.choice("--backend", a.backend, "process group backend", {"gloo", "mpi"});
  p.integer("--total", a.total, "floats reduced per run, in all", 1, int64_t{1} << 34);
  p.integers("--sizes", a.sizes, "floats per call, one JSON line each", 1, int64_t{1} << 34);
  p.integer("--iters", a.iters, "timed runs per size (the median is reported)", 1, 100000);
  p.integer("--round-robin", a.round_robin, "process groups used round-robin (Figure 12)", 1, 64);
  p.integer("--collective-checks", collective_checks,
            "1: check every collective across ranks (the default); 0: only the first (LOCKSTEP_COLLECTIVE_CHECKS=0)", 0, 1);
  p.integer("--buffers", a.buffers, "1: the tensors are views of one pg->empty_buffer (as DDP's buckets); 0: "
            "ordinary tensors", 0, 1);
  p.parse(argc, argv);
  if (collective_checks == 0) setenv("LOCKSTEP_COLLECTIVE_CHECKS", "0", 1);
  const std::optional<int> world = p.environment([] { return dist::launched_world_size(); });
  if (!world) {
    p.usage_error("not started by a launcher (WORLD_SIZE and OMPI_COMM_WORLD_SIZE are unset); run it as "
                  "`lockstep-run --nproc-per-node 2 -- bench_allreduce` or `mpirun -np 2 bench_allreduce --backend mpi`");
  }
  p.environment([] { return dist::resolve_rendezvous(); });  // RANK and the rest, before any connection
  return a;
}

using lockstep::bench::median;  // bench/bench_stats.h

// Issues one allreduce per tensor, then waits for all; returns milliseconds.
double run_once(dist::ProcessGroup& pg, std::vector<ls::Tensor>& tensors) {
  pg.barrier()->wait();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<dist::Work>> works;
  works.reserve(tensors.size());
  for (auto& t : tensors) works.push_back(pg.allreduce(t));
  for (auto& w : works) w->wait();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// One group of the backend, or K of them behind a ProcessGroupRoundRobin,
// each rendezvousing under its own store prefix (paper Figure 12).
std::shared_ptr<dist::ProcessGroup> make_group(const Args& a) {
  if (a.round_robin <= 1) return dist::init_process_group(a.backend);
  std::vector<std::shared_ptr<dist::ProcessGroup>> groups;
  if (a.backend == "mpi") {
    for (int k = 0; k < a.round_robin; ++k) groups.push_back(dist::ProcessGroupMPI::create());
  } else {
    dist::RendezvousInfo info = dist::rendezvous_from_env();
    dist::ProcessGroupGloo::Options options;
    options.timeout = info.timeout;
    options.master_addr = info.master_addr;
    for (int k = 0; k < a.round_robin; ++k) {
      auto store = std::make_shared<dist::PrefixStore>("bench/pg" + std::to_string(k), info.store);
      groups.push_back(std::make_shared<dist::ProcessGroupGloo>(store, info.rank, info.world_size, options));
    }
  }
  return std::make_shared<dist::ProcessGroupRoundRobin>(groups);
}

}  // namespace

int run_main(int argc, char** argv) {
  Args args = parse(argc, argv);
  ls::set_num_threads(1);
  std::shared_ptr<dist::ProcessGroup> pg = make_group(args);
  const bool rank0 = pg->rank() == 0;
  double ms_per_call_smallest = 0;
  for (int64_t per_call : args.sizes) {
    const int64_t calls = std::max<int64_t>(1, args.total / per_call);
    std::vector<ls::Tensor> tensors;
    tensors.reserve(calls);
    ls::Tensor all;  // (calls * per_call) with --buffers 1
    if (args.buffers == 1) all = pg->empty_buffer(calls * per_call, ls::kFloat32, ls::Device::cpu());
    for (int64_t i = 0; i < calls; ++i) {
      tensors.push_back(args.buffers == 1 ? all.narrow(0, i * per_call, per_call) : ls::zeros({per_call}));
      tensors.back().fill_(1.0);
    }
    run_once(*pg, tensors);  // warm-up; the ones now hold the world size
    const float want = static_cast<float>(pg->size());
    for (auto& t : {tensors.front(), tensors.back()}) {
      const float* p = t.data_ptr<float>();
      if (p[0] != want || p[per_call - 1] != want) {
        std::fprintf(stderr, "bench_allreduce: rank %d got %g, expected %g\n", pg->rank(), p[0], want);
        return 1;
      }
    }
    std::vector<double> ms;
    for (int it = 0; it < args.iters; ++it) {
      for (auto& t : tensors) t.fill_(1.0);  // keep values finite
      ms.push_back(run_once(*pg, tensors));
    }
    const double m = median(ms);
    const double gbps = 4.0 * static_cast<double>(per_call * calls) / (m / 1e3) / 1e9;
    if (per_call == args.sizes.front()) ms_per_call_smallest = m / calls;
    if (rank0) {
      std::printf("{\"bench\":\"allreduce\",\"backend\":\"%s\",\"world\":%d,\"per_call\":%lld,"
                  "\"calls\":%lld,\"iters\":%d,\"buffers\":%d,\"median_ms\":%.3f,\"ms_per_call\":%.4f,"
                  "\"algbw_gbps\":%.3f}\n",
                  pg->backend_name().c_str(), pg->size(), static_cast<long long>(per_call),
                  static_cast<long long>(calls), args.iters, args.buffers, m, m / calls, gbps);
      std::fflush(stdout);
    }
  }
  if (rank0) {
    std::printf("{\"summary\":true,\"bench\":\"allreduce\",\"backend\":\"%s\",\"world\":%d,\"total\":%lld,"
                "\"smallest_per_call\":%lld,\"ms_per_call_at_smallest\":%.4f}\n",
                pg->backend_name().c_str(), pg->size(), static_cast<long long>(args.total),
                static_cast<long long>(args.sizes.front()), ms_per_call_smallest);
  }
  pg->barrier()->wait();
  return 0;
}

int main(int argc, char** argv) {
  return lockstep::cli::run("bench_allreduce", [&] { return run_main(argc, argv); });
}
