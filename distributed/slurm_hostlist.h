// distributed/slurm_hostlist.h — Slurm's compressed host lists
// (SLURM_JOB_NODELIST, SLURM_STEP_NODELIST), as `scontrol show hostnames`
// expands them: "node[01-03,7],gpu5" is node01 node02 node03 node7 gpu5.
//
// A list is comma-separated host expressions (commas inside brackets belong
// to the brackets); an expression is text with bracketed sets of numbers or
// ranges "a-b", expanded left to right (several brackets multiply:
// "r[1-2]n[1-2]" is r1n1 r1n2 r2n1 r2n2); a range keeps the width of its
// first number, so zero padding survives ("[08-10]" is 08 09 10). The
// rendezvous uses the first host as MASTER_ADDR under srun (rank 0 of a Slurm
// step runs on the first node of the step). Errors throw ls::Error naming
// `variable` and what is wrong.
// Read before: distributed/rendezvous.h. Read next: distributed/slurm_hostlist.cpp.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace lockstep::distributed {

// Every host of `list`; throws past `max_hosts` (a safety bound, not Slurm's).
std::vector<std::string> expand_hostlist(const std::string& list, const std::string& variable,
                                         size_t max_hosts = 1u << 20);
// The first host of `list`, without expanding the rest.
std::string first_host(const std::string& list, const std::string& variable);

}  // namespace lockstep::distributed
