// distributed/oversubscription.cpp — see distributed/oversubscription.h.
// Read before: distributed/oversubscription.h.
#include "distributed/oversubscription.h"

#include <sched.h>
#include <strings.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/parallel.h"

namespace lockstep::distributed::detail {

namespace {

std::optional<int> env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);  // SLURM_STEP_TASKS_PER_NODE "2(x3)": the first node's 2
  if (end == v || n < 1 || n > 1 << 20) return std::nullopt;
  return static_cast<int>(n);
}

// The CPUs of this process's cpuset (Note [Ranks bound to CPUs of their own]): cgroup v2's
// cpuset.cpus.effective or v1's cpuset.effective_cpus; 0 when neither can be read.
int cpuset_cpus() {
  std::ifstream cgroups("/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroups, line)) {  // "0::/path" (v2) or "3:cpuset:/path" (v1)
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1), path = line.substr(second + 1);
    std::string file;
    if (controllers.empty()) file = "/sys/fs/cgroup" + path + "/cpuset.cpus.effective";
    if (controllers == "cpuset") file = "/sys/fs/cgroup/cpuset" + path + "/cpuset.effective_cpus";
    if (file.empty()) continue;
    std::ifstream in(file);
    std::string cpus;
    if (!std::getline(in, cpus)) continue;
    if (const int n = cpu_list_count(cpus); n > 0) return n;
  }
  return 0;
}

}  // namespace

int cpu_list_count(const std::string& list) {
  int count = 0;
  std::istringstream parts(list);
  std::string part;
  while (std::getline(parts, part, ',')) {
    if (!part.empty() && part.back() == '\n') part.pop_back();
    if (part.empty()) continue;
    int lo = 0, hi = 0;
    char dash = 0;
    std::istringstream range(part);
    if (!(range >> lo)) return 0;
    if (range >> dash) {
      if (dash != '-' || !(range >> hi) || hi < lo) return 0;
    } else {
      hi = lo;
    }
    count += hi - lo + 1;
  }
  return count;
}

RankCpus rank_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) < 1) return {};
  const int mask = CPU_COUNT(&set);
  int pool = cpuset_cpus();
  if (pool == 0) pool = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return {mask, mask < pool};
}

std::optional<LocalRanks> local_ranks_from_environment() {
  const char* pairs[][2] = {{"LOCAL_WORLD_SIZE", "LOCAL_RANK"},
                            {"OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
                            {"MPI_LOCALNRANKS", "MPI_LOCALRANKID"},
                            {"SLURM_STEP_TASKS_PER_NODE", "SLURM_LOCALID"}};
  for (const auto& [size_var, rank_var] : pairs) {
    if (const std::optional<int> size = env_int(size_var)) {
      const char* r = std::getenv(rank_var);
      return LocalRanks{*size, r != nullptr ? std::atoi(r) : 0};
    }
  }
  return std::nullopt;
}

std::string oversubscription_warning(const LocalRanks& local, int threads, RankCpus cpus, const char* policy) {
  const int sharing = cpus.bound ? 1 : local.size;  // ranks whose threads share these CPUs
  if (static_cast<long>(sharing) * threads <= cpus.cpus) return "";
  if (policy != nullptr && strcasecmp(policy, "passive") == 0) return "";
  const char* policy_text = policy != nullptr && *policy != '\0' ? policy : "unset";
  const int fit = std::max(1, cpus.cpus / sharing);
  if (cpus.bound) {
    return lockstep::detail::str(
        "lockstep: this rank is bound to ", cpus.cpus, " CPU(s) of its own (by its launcher) and runs ", threads,
        " OpenMP threads, and OMP_WAIT_POLICY is ", policy_text,
        ": idle OpenMP threads spin on the CPUs the busy ones need, which can make every step up to ~2x slower "
        "(Note [Oversubscribed ranks]). Export OMP_NUM_THREADS=", fit,
        ", or bind each rank to as many CPUs as threads (mpirun --map-by slot:PE=", threads,
        "), or OMP_WAIT_POLICY=PASSIVE (mpirun -x OMP_WAIT_POLICY=PASSIVE)\n");
  }
  return lockstep::detail::str(
      "lockstep: ", local.size, " ranks on this machine x ", threads, " OpenMP threads each > ", cpus.cpus,
      " CPUs, and OMP_WAIT_POLICY is ", policy_text,
      ": idle OpenMP threads spin on CPUs the other ranks need, which can make every step up to ~2x slower "
      "(Note [Oversubscribed ranks]). Export OMP_WAIT_POLICY=PASSIVE (mpirun -x OMP_WAIT_POLICY=PASSIVE; "
      "lockstep-run sets it), or OMP_NUM_THREADS=", fit, " so that ranks x threads <= CPUs\n");
}

void warn_if_oversubscribed() {
  static bool warned = false;
  const std::optional<LocalRanks> local = local_ranks_from_environment();
  if (warned || !local || local->rank != 0) return;
  warned = true;
  const std::string text = oversubscription_warning(*local, get_num_threads(), rank_cpus(),
                                                    std::getenv("OMP_WAIT_POLICY"));
  if (!text.empty()) std::fputs(text.c_str(), stderr);
}

}  // namespace lockstep::distributed::detail
