// distributed/checkpoint.cpp — save_on_rank0: rank 0 writes, a status broadcast is the barrier.
// Read before: distributed/checkpoint.h.
#include "distributed/checkpoint.h"

#include <exception>

#include "core/error.h"
#include "core/factory.h"

namespace lockstep::distributed {

void save_on_rank0(const std::map<std::string, Tensor>& tensors, const std::string& path,
                   ProcessGroup& pg, const nn::Metadata& metadata) {
  std::exception_ptr failure;
  std::string reason;
  if (pg.rank() == 0) {
    try {
      nn::save_tensors(tensors, path, metadata);
    } catch (const std::exception& e) {
      failure = std::current_exception();
      reason = e.what();
    }
  }
  // (1) int64: 1 = the file is complete, 0 = rank 0 failed. Every rank takes
  // part even when rank 0 failed, so nobody waits for a collective that never comes.
  Tensor status = full({1}, pg.rank() == 0 && !failure ? 1.0 : 0.0, TensorOptions().dtype(kInt64));
  pg.broadcast(status, /*root=*/0)->wait(pg.timeout());
  if (failure) std::rethrow_exception(failure);
  LS_CHECK(status.item<int64_t>() == 1, "save_on_rank0 (rank ", pg.rank(),
           "): rank 0 could not write the checkpoint '", path,
           "'; its error is in rank 0's output. Nothing was written, and the previous "
           "checkpoint at that path (if any) is intact.");
}

}  // namespace lockstep::distributed
