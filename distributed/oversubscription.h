// distributed/oversubscription.h — the warning init_process_group gives when the ranks on
// this machine, with their OpenMP threads, outnumber its CPUs while idle OpenMP threads
// spin (Note [Oversubscribed ranks] in tools/launch_threads.h: lockstep-run prevents it
// by setting OMP_WAIT_POLICY=PASSIVE; under mpirun, srun or torchrun nothing does).
// Read before: distributed/init.h. Read next: core/parallel.h.
#pragma once

#include <optional>
#include <string>

namespace lockstep::distributed::detail {

// The ranks on this machine and this rank's place among them, from the launcher's
// variables: LOCAL_WORLD_SIZE / LOCAL_RANK (torchrun, lockstep-run), Open MPI's
// OMPI_COMM_WORLD_LOCAL_SIZE / _LOCAL_RANK, MPICH's MPI_LOCALNRANKS / MPI_LOCALRANKID,
// Slurm's SLURM_STEP_TASKS_PER_NODE (one node's count) / SLURM_LOCALID. Empty when none.
struct LocalRanks {
  int size = 1;
  int rank = 0;
};
std::optional<LocalRanks> local_ranks_from_environment();

// § Note [Ranks bound to CPUs of their own]
// The CPUs a rank's threads compete for are its affinity mask's, shared with the other
// ranks of the machine unless its launcher bound it to CPUs of its own: `mpirun -np 2`
// binds each rank to a core by default (and says so in OMPI_MCA_orte_bound_at_launch),
// `srun --cpu-bind=cores` and `taskset` per rank do the same. A binding shows as a mask
// narrower than the CPUs of the process's cpuset (its cgroup's cpuset.cpus.effective, or
// the machine's online CPUs where no cpuset is readable); a cpuset that a container or a
// Slurm job gives all its ranks narrows both alike and is no binding. Bound, a rank
// oversubscribes only its own CPUs (threads > CPUs); unbound, the machine's
// (ranks x threads > CPUs).
struct RankCpus {
  int cpus = 1;        // in this rank's affinity mask
  bool bound = false;  // the mask is narrower than the cpuset's CPUs
};
RankCpus rank_cpus();

// The number of CPUs in a Linux CPU list ("0-3,8,10-11\n" -> 7); 0 when it does not parse.
int cpu_list_count(const std::string& list);

// The warning for `local` ranks of `threads` OpenMP threads each on `cpus` under
// OMP_WAIT_POLICY `policy` (null: unset); empty when there is nothing to warn about.
std::string oversubscription_warning(const LocalRanks& local, int threads, RankCpus cpus, const char* policy);

// At init_process_group: prints the warning once, from the first rank of this machine.
void warn_if_oversubscribed();

}  // namespace lockstep::distributed::detail
