// distributed/process_group/process_group_mpi_fingerprints.cpp — the MPI group's fingerprint
// exchanges, posted ahead of need (Note [Fingerprints exchanged ahead over MPI]).
// Read before: distributed/process_group/process_group_mpi_fingerprints.h.
#include "distributed/process_group/process_group_mpi_fingerprints.h"

#include "core/error.h"

namespace lockstep::distributed::mpi_detail {

using Message = detail::FingerprintLedger::Message;

void mpi_check(int rc, const std::string& what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(lockstep::detail::str("mpi ", what, " failed: ", std::string(msg, len)));
}

FingerprintChecks::FingerprintChecks(int rank, int size, MPI_Comm comm)
    : ledger_(rank, size, "mpi"), comm_(comm), all_(static_cast<size_t>(size)) {}

void FingerprintChecks::record(const detail::Fingerprint& f) {
  std::lock_guard<std::mutex> lock(mutex_);
  ledger_.record(f, /*checked=*/true);
}

void FingerprintChecks::check(int64_t seq) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!ledger_.covered(seq)) {
    if (request_ == MPI_REQUEST_NULL) post(lock);  // seq is recorded: this rank's part is not empty
    complete(lock);
  }
  ledger_.verdict(seq);
}

void FingerprintChecks::post_ahead() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (request_ == MPI_REQUEST_NULL && ledger_.recorded_end() > ledger_.covered_end()) post(lock);
}

void FingerprintChecks::finish() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (request_ == MPI_REQUEST_NULL) return;
  // Matched on every rank of a correct program (see the Note); its parts need no comparison.
  MPI_Wait(&request_, MPI_STATUS_IGNORE);
}

void FingerprintChecks::post(std::unique_lock<std::mutex>& lock) {
  mine_ = ledger_.outgoing();
  lock.unlock();  // callers keep recording while MPI copies
  const int rc = MPI_Iallgather(&mine_, sizeof(Message), MPI_BYTE, all_.data(), sizeof(Message), MPI_BYTE, comm_,
                                &request_);
  lock.lock();
  if (rc != MPI_SUCCESS) request_ = MPI_REQUEST_NULL;
  mpi_check(rc, "fingerprint exchange (MPI_Iallgather)");
}

void FingerprintChecks::complete(std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  const int rc = MPI_Wait(&request_, MPI_STATUS_IGNORE);  // sets request_ to MPI_REQUEST_NULL
  lock.lock();
  mpi_check(rc, "fingerprint exchange (MPI_Wait)");
  ledger_.absorb(all_);  // one part per rank; throws when the ranks are out of step
}

}  // namespace lockstep::distributed::mpi_detail
