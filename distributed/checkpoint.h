// distributed/checkpoint.h — a checkpoint written by rank 0 that every rank waits for.
//
// Replicas are identical under DDP, so one rank writes the checkpoint. The
// others must not run ahead (and, say, read the file or exit) before it is
// complete, and must not hang if writing fails. save_on_rank0 does both:
//   rank 0  writes the tensors with nn::save_tensors (atomic: temp file +
//           rename, CRC-32 in the metadata; see nn/serialize.h), then
//           broadcasts one int64 status (1 = written, 0 = failed);
//   others  wait for that status within the group's timeout.
// On success every rank returns once the file is complete; on failure rank 0
// rethrows its error and every other rank throws one that says rank 0 failed
// and names the path — nobody is left waiting. The status broadcast doubles as
// the barrier, so a save costs one tiny collective.
//
// Read before: nn/serialize.h, distributed/process_group/process_group.h.
// Read next: examples/train_fashion_mnist.cpp (its per-epoch checkpoint).
#pragma once

#include <map>
#include <string>

#include "core/tensor.h"
#include "distributed/process_group/process_group.h"
#include "nn/serialize.h"

namespace lockstep::distributed {

// Rank 0 saves `tensors` (+ metadata) to `path`; every rank of `pg` returns
// when the file is complete, or throws if rank 0 could not write it.
void save_on_rank0(const std::map<std::string, Tensor>& tensors, const std::string& path,
                   ProcessGroup& pg, const nn::Metadata& metadata = {});

}  // namespace lockstep::distributed
