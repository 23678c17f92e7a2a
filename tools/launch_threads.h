// tools/launch_threads.h — the intra-op threads of the ranks lockstep-run starts on one
// machine: OMP_NUM_THREADS when the user left it unset (as torchrun does), and
// OMP_WAIT_POLICY=PASSIVE when the ranks' threads outnumber the CPUs.
//
// § Note [Oversubscribed ranks]
// lockstep's ops run on OpenMP threads (core/parallel.h). At the end of every parallel
// region, GNU OpenMP's threads spin for a while (~300000 iterations) before they sleep,
// which pays when each thread has a CPU of its own. With N ranks on one machine, each
// running T threads, and N x T greater than the CPUs they may run on, a spinning thread
// holds a CPU that another rank's thread needs, and every region ends late (ResNet50, 2
// ranks x 2 threads on 2 CPUs: a step about twice as long as with OMP_WAIT_POLICY=PASSIVE,
// and DDP's communication thread, one more per rank, costs more on top; the numbers are in
// docs/results/evaluation.md, 2026-12-06). The policy is read once, when the OpenMP
// runtime loads, before main: so the launcher sets it, not the library. lockstep-run:
//   - OMP_NUM_THREADS unset: each rank gets max(1, CPUs / N) threads (torchrun gives 1), and
//     a note on stderr says so;
//   - N x OMP_NUM_THREADS > CPUs and OMP_WAIT_POLICY unset: OMP_WAIT_POLICY=PASSIVE, and a
//     note;
//   - OMP_NUM_THREADS unset and the share one thread a rank (N >= CPUs, N > 1): PASSIVE too,
//     said in the first note. A one-thread team never waits at a barrier, so the policy
//     costs nothing there; but a program that sets its own thread count
//     (ls::set_num_threads, a --threads flag) past its share oversubscribes the CPUs after
//     the runtime has read the policy (bench_overlap --threads 2, 2 ranks on 2 CPUs: local
//     iteration 2316 ms spinning, 1323 ms PASSIVE; docs/results/evaluation.md, 2026-12-07
//     afternoon).
//   A value the user set is kept in every case. Under mpirun or srun, export the two
//   variables yourself (mpirun -x OMP_WAIT_POLICY=PASSIVE).
// CPUs = those this process may run on (sched_getaffinity: a cpuset or taskset counts); a
// rank bound to CPUs of its own (mpirun's default for 2 ranks) counts only its own threads
// (Note [Ranks bound to CPUs of their own], distributed/oversubscription.h).
// Read before: tools/lockstep_run.cpp. Read next: core/parallel.h.
#pragma once

#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace lockstep::launcher {

// The CPUs this process may run on.
inline int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
}

// Sets the variables of Note [Oversubscribed ranks] in this process's environment, which
// the `nproc` ranks it then starts inherit; notes on stderr what it set. `cpus`: the
// machine's (available_cpus()).
inline void set_rank_threads(int nproc, int cpus) {
  const char* threads_env = std::getenv("OMP_NUM_THREADS");
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const bool chosen = threads_env == nullptr || *threads_env == '\0';  // the launcher picks the count
  // "4" or "4,2" (nested levels): the first level's count.
  const int threads = chosen ? (cpus / nproc > 1 ? cpus / nproc : 1) : std::atoi(threads_env);
  // One thread a rank: a program that raises its own count would oversubscribe.
  const bool one_each = chosen && threads == 1 && nproc > 1;
  const bool oversubscribed = threads > 0 && static_cast<long>(nproc) * threads > cpus;
  const bool passive = (policy == nullptr || *policy == '\0') && (one_each || oversubscribed);
  if (chosen) setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
  if (passive) setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  if (chosen) {
    std::fprintf(stderr, "lockstep-run: OMP_NUM_THREADS is unset; each of the %d rank(s) gets %d thread(s) (%d CPU(s) "
                 "/ %d)%s; set OMP_NUM_THREADS to choose\n", nproc, threads, cpus, nproc,
                 passive && one_each ? ", and OMP_WAIT_POLICY=PASSIVE in case the program asks for more" : "");
  }
  if (passive && !one_each) {
    std::fprintf(stderr, "lockstep-run: %d rank(s) x %d thread(s) on %d CPU(s): setting OMP_WAIT_POLICY=PASSIVE so that "
                 "idle threads sleep instead of spinning on a CPU another rank needs; set OMP_WAIT_POLICY to "
                 "choose, or fewer OMP_NUM_THREADS\n", nproc, threads, cpus);
  }
}

}  // namespace lockstep::launcher
