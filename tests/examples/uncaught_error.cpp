// tests/examples/uncaught_error.cpp — a user's program as docs/api.md shows it, with no
// try/catch of its own: it joins the job with init_process_group, and rank
// LOCKSTEP_TEST_THROW_RANK throws an ls::Error that nothing catches, while the other ranks
// wait for it in an allreduce (and fail in turn, uncaught too, once they see it gone).
// check_uncaught_error.sh runs it under lockstep-run and alone: Note
// [TORCHELASTIC_ERROR_FILE] (the library's terminate handler writes the error file) and
// Note [First failure] (the launcher names the rank that threw, with its message).
// Test-only, never installed.
// Read before: distributed/error_file.h. Read next: tests/examples/check_uncaught_error.sh.
#include <lockstep.h>

#include <cstdlib>
#include <string>

namespace ls = lockstep;

int main() {
  auto pg = ls::distributed::init_process_group("gloo");
  const char* thrower = std::getenv("LOCKSTEP_TEST_THROW_RANK");
  if (thrower != nullptr && std::stoi(thrower) == pg->rank()) {
    throw ls::Error("uncaught_error: rank " + std::to_string(pg->rank()) + " found its input batch empty");
  }
  ls::Tensor t = ls::ones({4});  // (4)
  pg->allreduce(t)->wait(pg->timeout());
  return 0;
}
