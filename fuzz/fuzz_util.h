// fuzz/fuzz_util.h — what the file-reader fuzz targets share: failing loudly
// (abort, which libFuzzer records as a crash with the input) and handing an
// input to a reader that takes a path, through one in-memory file (memfd)
// rewritten for each input.
// Read before: fuzz/CMakeLists.txt. Read next: fuzz/fuzz_idx.cpp, fuzz/fuzz_safetensors.cpp.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace lockstep::fuzz {

// The target's invariant broke: report and abort so libFuzzer keeps the input.
[[noreturn]] inline void fail(const char* target, const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", target, what.c_str());
  std::abort();
}

// The path of a memfd holding exactly `data`; one file per process, rewritten per input.
inline const std::string& memfd_path(const char* target, const uint8_t* data, size_t size) {
  static const int fd = memfd_create(target, MFD_CLOEXEC);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (fd < 0 || ::ftruncate(fd, 0) != 0) fail(target, "memfd_create/ftruncate failed");
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) fail(target, "pwrite to the memfd failed");
    done += static_cast<size_t>(n);
  }
  return path;
}

}  // namespace lockstep::fuzz
