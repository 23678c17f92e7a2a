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

// The warning for `local` ranks of `threads` OpenMP threads each on `cpus` CPUs under
// OMP_WAIT_POLICY `policy` (null: unset); empty when there is nothing to warn about.
std::string oversubscription_warning(const LocalRanks& local, int threads, int cpus, const char* policy);

// At init_process_group: prints the warning once, from the first rank of this machine.
void warn_if_oversubscribed();

}  // namespace lockstep::distributed::detail
