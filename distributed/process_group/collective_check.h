// distributed/process_group/collective_check.h — catching ranks that disagree before their
// data meets, and the argument checks every backend shares.
//
// § Note [Collective fingerprints]
// Ranks must issue the same collectives, with the same sizes, dtypes, ops and
// roots, in the same order. A rank that does not would pair its bytes with a
// different collective on its peers: a sum of wrong bytes, an abort inside the
// transport, or a hang that blames a dead peer. So before a collective's data
// moves, each rank's 40-byte Fingerprint (sequence number, kind, dtype, numel,
// op, root) reaches every other rank, and every rank compares all of them
// (check_fingerprints) and throws an error naming both ranks' calls and the
// fields that differ — on every rank alike, since all see the same set.
// On by default for every collective; LOCKSTEP_COLLECTIVE_CHECKS=0 (or a
// group's Options::check_every_collective = false) checks only a group's first
// collective (cheap insurance against a wrong program from the start), and
// LOCKSTEP_DISTRIBUTED_DEBUG forces every one on. The decision depends only on
// the sequence number and the environment, so all ranks agree on whether to
// exchange. How a backend moves the fingerprints: in batches (Note [Batched
// fingerprints], fingerprint_ledger.h): each rank records them at issue, and
// one exchange compares all that every rank has issued so far. Gloo runs the
// exchange over its unbound buffers on the worker that first needs a verdict
// (Note [Fingerprints exchanged in batches over Gloo],
// process_group_gloo_fingerprints.h; its check entry point is
// ProcessGroupGloo::check_before_running); MPI with an MPI_Iallgather on a
// communicator of its own, posted ahead of need so that it overlaps the data
// (Note [Fingerprints exchanged ahead over MPI]); NCCL over a host group of its own, one
// collective at a time (check_across_ranks below). Cost: README "Reliability"
// and docs/results/collective_checks.md. After a mismatch the Gloo group
// refuses further collectives (ones issued after it may already be running out
// of step); the single-threaded MPI group stays usable.
// Read before: distributed/process_group/process_group.h. Read next:
// distributed/process_group/process_group_gloo.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "distributed/process_group/process_group.h"

namespace lockstep::distributed::detail {

enum class CollectiveKind : int32_t { ALLREDUCE, BROADCAST, ALLGATHER, REDUCE_SCATTER, BARRIER, SEND, RECV, REDUCE };
const char* collective_name(CollectiveKind kind);

struct Fingerprint {
  int64_t seq = 0;    // this collective's position in the group's issue order
  int32_t kind = 0;   // CollectiveKind
  int32_t dtype = -1; // ScalarType, -1 when none (barrier)
  int64_t numel = 0;  // elements per rank
  int32_t op = -1;    // ReduceOp, -1 when none
  int32_t root = -1;  // broadcast / reduce root, -1 when none
  int64_t reserved = 0;
};
static_assert(sizeof(Fingerprint) == 40, "Fingerprint travels as raw bytes");

Fingerprint make_fingerprint(int64_t seq, CollectiveKind kind, const Tensor* t = nullptr,
                             int op = -1, int root = -1);
// "allreduce #3 of 1000 float32, SUM"
std::string describe(const Fingerprint& f);
// `all` holds size fingerprints, rank r's at all[r]. "" when they agree, else the
// error text naming the first rank whose fingerprint differs from all[my_rank],
// and the fields; check_fingerprints throws it as an ls::Error.
std::string fingerprint_mismatch(const Fingerprint* all, int size, int my_rank, const std::string& backend);
void check_fingerprints(const Fingerprint* all, int size, int my_rank, const std::string& backend);
// One collective's check over another group of the same ranks (a host group:
// the NCCL backend's, Note [NCCL collective checks]): allgathers `mine` there,
// blocking, and throws like check_fingerprints. `backend` starts the message.
void check_across_ranks(ProcessGroup& group, const Fingerprint& mine, const std::string& backend);
// True when LOCKSTEP_DISTRIBUTED_DEBUG asks for a fingerprint on every collective.
bool debug_checks_enabled();
// Whether a group checks every collective: `option` (a group's
// Options::check_every_collective, true by default), unless
// LOCKSTEP_COLLECTIVE_CHECKS says "0" (off) or "1" (on); LOCKSTEP_DISTRIBUTED_DEBUG
// forces it on. Any other value of LOCKSTEP_COLLECTIVE_CHECKS is an ls::Error.
bool collective_checks_enabled(bool option);

// Throws unless t is a defined, contiguous CPU tensor (what every backend moves).
void check_tensor(const Tensor& t, const char* collective, const char* what = "tensor");
// Throws unless 0 <= r < size.
void check_rank(int r, int size, const char* collective, const char* what);

// allgather: fills an empty `outputs` with size tensors shaped like input, or checks
// that it holds size contiguous tensors of input's dtype and numel.
void prepare_gather_outputs(std::vector<Tensor>& outputs, const Tensor& input, int size,
                            const char* collective);
// reduce_scatter: inputs must be size contiguous tensors of output's dtype and numel.
void check_scatter_inputs(const std::vector<Tensor>& inputs, const Tensor& output, int size,
                          const char* collective);

}  // namespace lockstep::distributed::detail
