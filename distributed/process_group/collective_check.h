// distributed/process_group/collective_check.h — catching ranks that disagree before their
// data meets, and the argument checks every backend shares.
//
// § Note [Collective fingerprints]
// Ranks must issue the same collectives, with the same sizes, dtypes, ops and
// roots, in the same order. A rank that does not would pair its bytes with a
// different collective on its peers: data corrupted, or a hang. So before a
// collective's data moves, each rank can contribute a 40-byte Fingerprint
// (sequence number, kind, dtype, numel, op, root) to an allgather, and every
// rank compares all of them and throws an error that names the first
// disagreeing rank and field. The exchange is one extra small round trip:
// backends do it on the first collective of a group always (cheap insurance
// against a wrong program from the start) and on every collective when
// LOCKSTEP_DISTRIBUTED_DEBUG is set (any value but "0" / "OFF"), or when the
// group's options ask for it. The decision depends only on the sequence number
// and the environment, so all ranks agree on whether to exchange. After a
// mismatch the Gloo group refuses further collectives (ones issued after it may
// already be running out of step); the single-threaded MPI group stays usable.
// Cost: one allgather of 40 bytes per rank — about one small-message latency
// (~0.1-0.3 ms here), paid once per group, or per collective in debug mode.
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
// `all` holds size fingerprints, rank r's at all[r]. Throws ls::Error naming the
// first rank whose fingerprint differs from all[my_rank], and the fields.
void check_fingerprints(const Fingerprint* all, int size, int my_rank, const std::string& backend);
// True when LOCKSTEP_DISTRIBUTED_DEBUG asks for a fingerprint on every collective.
bool debug_checks_enabled();

// Throws unless t is a defined, contiguous CPU tensor (what every backend moves);
// waits for a pending write into it (Note [Pending writes], core/pending_write.h).
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
