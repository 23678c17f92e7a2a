// distributed/oversubscription.cpp — see distributed/oversubscription.h.
// Read before: distributed/oversubscription.h.
#include "distributed/oversubscription.h"

#include <sched.h>
#include <strings.h>

#include <cstdio>
#include <cstdlib>

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

int cpus_available() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) < 1) return 1;
  return CPU_COUNT(&set);
}

}  // namespace

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

std::string oversubscription_warning(const LocalRanks& local, int threads, int cpus, const char* policy) {
  if (static_cast<long>(local.size) * threads <= cpus) return "";
  if (policy != nullptr && strcasecmp(policy, "passive") == 0) return "";
  return lockstep::detail::str(
      "lockstep: ", local.size, " ranks on this machine x ", threads, " OpenMP threads each > ", cpus,
      " CPUs, and OMP_WAIT_POLICY is ", policy != nullptr && *policy != '\0' ? policy : "unset",
      ": idle OpenMP threads spin on CPUs the other ranks need, which can make every step up to ~2x slower "
      "(Note [Oversubscribed ranks]). Export OMP_WAIT_POLICY=PASSIVE (mpirun -x OMP_WAIT_POLICY=PASSIVE; "
      "lockstep-run sets it), or OMP_NUM_THREADS=", std::max(1, cpus / local.size),
      " so that ranks x threads <= CPUs\n");
}

void warn_if_oversubscribed() {
  static bool warned = false;
  const std::optional<LocalRanks> local = local_ranks_from_environment();
  if (warned || !local || local->rank != 0) return;
  warned = true;
  const std::string text = oversubscription_warning(*local, get_num_threads(), cpus_available(),
                                                    std::getenv("OMP_WAIT_POLICY"));
  if (!text.empty()) std::fputs(text.c_str(), stderr);
}

}  // namespace lockstep::distributed::detail
