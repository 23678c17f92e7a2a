// distributed/process_group/process_group_mpi_fingerprints.h — internal to the MPI backend:
// the fingerprints of a group's collectives, recorded at issue and compared across ranks in
// batches on the MPI thread, each batch's exchange overlapping the previous batch's data.
//
// § Note [Fingerprints exchanged ahead over MPI]
// The MPI group checks every collective in batches (Note [Batched fingerprints]).
// A blocking MPI_Allgather of the batch on the group's own communicator would be
// one more rendezvous of the two MPI threads per batch, with nothing else to do
// meanwhile — and on the data communicator an exchange must sit at the same place
// in every rank's sequence of collectives, which would force every rank to run it
// at the same collective. So the exchanges travel on a communicator of their own
// (a second duplicate of MPI_COMM_WORLD), where only exchanges run, always in the
// order 0, 1, 2, ... on every rank, whenever each rank posts them; and they are
// non-blocking:
//   - at issue (the caller's thread) each rank records the fingerprint;
//   - on the MPI thread, before collective n's data moves, check(n): when no
//     exchange has covered n, wait for the one in flight, or post one and wait;
//     compare (FingerprintLedger::absorb) and throw n's mismatch, if any — so the
//     guarantee is unchanged: no rank moves a collective's data before it has
//     compared every rank's fingerprint of that collective, and a mismatch fails
//     the collective on every rank (all compare the same parts) with nothing sent;
//   - right after, before n's data moves, post_ahead(): when fingerprints not
//     yet compared are recorded and no exchange is in flight, post the next one
//     (MPI_Iallgather). The data collectives that follow progress it, so by the
//     time the first collective it covers needs its verdict, it has usually
//     arrived, and the wait costs nothing.
// Every rank posts exchange k exactly once and only while it holds a recorded,
// uncompared fingerprint — one that it will run, and whose verdict it will wait
// for — so every posted exchange is matched and completed on every rank of a
// correct program (a rank that issues a collective its peers never issue hangs
// in that collective's check, as it would in the collective itself).
// finish() completes an exchange still in flight before the communicators are
// freed (a non-blocking collective may be neither freed nor cancelled).
// Read before: distributed/process_group/fingerprint_ledger.h,
// distributed/process_group/process_group_mpi.h (Note [One MPI thread]).
// Read next: distributed/process_group/process_group_mpi.cpp (ProcessGroupMPI::enqueue).
#pragma once

#define OMPI_SKIP_MPICXX 1  // the C API only
#include <mpi.h>

#include <mutex>
#include <string>
#include <vector>

#include "distributed/process_group/fingerprint_ledger.h"

namespace lockstep::distributed::mpi_detail {

// Throws ls::Error "mpi <what> failed: <MPI's message>" unless rc is MPI_SUCCESS.
void mpi_check(int rc, const std::string& what);

class FingerprintChecks {
 public:
  // `comm`: the group's exchange communicator, used by nothing else; the caller frees it after finish().
  FingerprintChecks(int rank, int size, MPI_Comm comm);

  // Caller's thread, at issue, in sequence order.
  void record(const detail::Fingerprint& f);
  // MPI thread, before collective `seq`'s data moves: throws its mismatch as an ls::Error.
  void check(int64_t seq);
  // MPI thread, after check(): posts the next exchange when one is due.
  void post_ahead();
  // MPI thread, before the communicator is freed.
  void finish();

 private:
  void post(std::unique_lock<std::mutex>& lock);      // with no exchange in flight
  void complete(std::unique_lock<std::mutex>& lock);  // waits for the one in flight and compares

  std::mutex mutex_;  // the ledger: callers record while the MPI thread compares
  detail::FingerprintLedger ledger_;
  const MPI_Comm comm_;
  // The exchange in flight (MPI thread only): this rank's part and every rank's.
  MPI_Request request_ = MPI_REQUEST_NULL;
  detail::FingerprintLedger::Message mine_;
  std::vector<detail::FingerprintLedger::Message> all_;  // (size,) rank r's part at all_[r]
};

}  // namespace lockstep::distributed::mpi_detail
