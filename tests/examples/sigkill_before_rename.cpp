// tests/examples/sigkill_before_rename.cpp — a fault injector for
// check_ddp_kill_resume.sh, loaded with LD_PRELOAD (CMake target
// lockstep_sigkill_before_rename, a MODULE library; test-only, never linked
// into lockstep).
//
// It wraps the C library's rename(). When LOCKSTEP_TEST_SIGKILL_BEFORE_RENAME
// names a path, the N-th rename() onto exactly that path
// (N = LOCKSTEP_TEST_SIGKILL_BEFORE_RENAME_COUNT, default 1) kills the process
// with SIGKILL instead of renaming: the checkpoint's temporary file has been
// written and fsync'd (Note [Atomic checkpoint writes], nn/serialize.h) but not
// yet renamed over the previous checkpoint — the worst moment for a crash
// during a save. Every other rename() is passed through unchanged.
// Read before: nn/serialize.cpp (how a checkpoint is written),
// tests/examples/check_ddp_kill_resume.sh.
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" int rename(const char* from, const char* to) {
  using RenameFn = int (*)(const char*, const char*);
  static RenameFn real = reinterpret_cast<RenameFn>(dlsym(RTLD_NEXT, "rename"));
  static std::atomic<long> matches{0};
  const char* target = std::getenv("LOCKSTEP_TEST_SIGKILL_BEFORE_RENAME");
  if (target != nullptr && *target != '\0' && to != nullptr && std::strcmp(to, target) == 0) {
    const char* count_env = std::getenv("LOCKSTEP_TEST_SIGKILL_BEFORE_RENAME_COUNT");
    const long count = count_env != nullptr ? std::atol(count_env) : 1;
    if (matches.fetch_add(1) + 1 == count) {
      char line[512];
      const int n = std::snprintf(line, sizeof(line),
                                  "sigkill_before_rename: pid %d killed before renaming '%s' to '%s'\n",
                                  static_cast<int>(getpid()), from, to);
      if (n > 0) (void)!write(2, line, static_cast<size_t>(n) < sizeof(line) ? n : sizeof(line) - 1);
      raise(SIGKILL);
    }
  }
  if (real == nullptr) return -1;
  return real(from, to);
}
