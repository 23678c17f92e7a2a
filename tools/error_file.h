// tools/error_file.h — torchrun's error file: when a program fails under
// torchrun, its "Root Cause" shows lockstep's message instead of "exitcode 1".
//
// § Note [TORCHELASTIC_ERROR_FILE]
// torchrun's agent gives each worker TORCHELASTIC_ERROR_FILE, a path to write
// when it fails, and reads it after the worker exits. The format is what
// PyTorch's ErrorHandler.record_exception writes
// (torch/distributed/elastic/multiprocessing/errors/error_handler.py):
//   {"message": {"message": "<type>: <what>",
//                "extraInfo": {"py_callstack": "<text>", "timestamp": "<unix s>"}}}
// torchrun prints py_callstack as the failure's "traceback" (there is no Python
// stack: lockstep puts the program, the rank and the message there). cli::run
// (an exception escaping a program) and Program::usage_error (exit 2) call
// write_error_file(); without the variable it does nothing. Writing is best
// effort: a failure to write never hides the original error.
// A fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT — an uncaught
// exception off the main thread ends in std::terminate's SIGABRT) writes
// "fatal signal SIGSEGV" the same way: Program's constructor calls
// catch_fatal_signals(), whose handler only uses async-signal-safe calls
// (open, write, close, clock_gettime) on text prepared beforehand, then dies
// of the same signal (the exit status torchrun reports is unchanged).
// Header-only, no lockstep libraries (lockstep-run includes tools/cli.h too).
// Read before: tools/cli.h. Read next: tests/examples/check_error_file.sh.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <ctime>
#include <string>

namespace lockstep::cli {

// `text` as a JSON string literal: quotes and backslashes escaped, control
// characters as \u00XX (newlines too; json.load reads them back), UTF-8 as is.
// (nn/safetensors_json.h has json_quote, but this header links no library.)
inline std::string json_string(const std::string& text) {
  static const char hex[] = "0123456789abcdef";
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') out += {'\\', static_cast<char>(c)};
    else if (c < 0x20) out += std::string("\\u00") + hex[c >> 4] + hex[c & 15];
    else out += static_cast<char>(c);
  }
  return out + "\"";
}

// Writes the error file named by TORCHELASTIC_ERROR_FILE (if set); `kind` is
// the error's type ("lockstep::Error", "usage error"). Returns true if written.
inline bool write_error_file(const std::string& program, const std::string& kind, const std::string& what) {
  const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (path == nullptr || *path == '\0') return false;
  const char* rank = std::getenv("RANK");
  const std::string where = program + (rank != nullptr ? std::string(" (rank ") + rank + ")" : std::string());
  const std::string message = kind + ": " + what;
  const std::string json = "{\"message\": {\"message\": " + json_string(message) +
                           ", \"extraInfo\": {\"py_callstack\": " + json_string(where + ": " + message + "\n") +
                           ", \"timestamp\": \"" + std::to_string(static_cast<long long>(std::time(nullptr))) +
                           "\"}}}\n";
  std::FILE* f = std::fopen(path, "w");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  return std::fclose(f) == 0 && ok;
}

namespace detail {

// Prepared by catch_fatal_signals(): the path, and the JSON around the signal name and time.
struct FatalSignalFile {
  char path[4096] = {};
  char where[512] = {};  // "PROG (rank R)"
};
inline FatalSignalFile& fatal_signal_file() {
  static FatalSignalFile f;
  return f;
}

inline void append(char* buf, size_t& n, size_t cap, const char* s) {
  while (*s != '\0' && n + 1 < cap) buf[n++] = *s++;
}

inline void on_fatal_signal(int sig) {
  const char* name = sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGFPE ? "SIGFPE"
                     : sig == SIGILL ? "SIGILL" : "SIGABRT";
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  char digits[24];
  int d = 0;
  for (long long t = now.tv_sec > 0 ? now.tv_sec : 0; d == 0 || t > 0; t /= 10) digits[d++] = char('0' + t % 10);
  char stamp[24];
  for (int i = 0; i < d; ++i) stamp[i] = digits[d - 1 - i];
  stamp[d] = '\0';
  static char buf[2048];
  size_t n = 0;
  const FatalSignalFile& f = fatal_signal_file();
  const char* const parts[] = {"{\"message\": {\"message\": \"fatal signal ", name,
                               "\", \"extraInfo\": {\"py_callstack\": \"", f.where, ": fatal signal ", name,
                               " (see the rank's stderr)\\n\", \"timestamp\": \"", stamp, "\"}}}\n"};
  for (const char* part : parts) append(buf, n, sizeof(buf), part);
  const int fd = ::open(f.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    (void)!::write(fd, buf, n);
    ::close(fd);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace detail

// Installs the fatal-signal handler when TORCHELASTIC_ERROR_FILE is set (once per process).
inline void catch_fatal_signals(const std::string& program) {
  const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (path == nullptr || *path == '\0' || std::strlen(path) >= sizeof(detail::FatalSignalFile::path)) return;
  detail::FatalSignalFile& f = detail::fatal_signal_file();
  std::strcpy(f.path, path);
  const char* rank = std::getenv("RANK");
  // JSON-escaped once here, not in the handler.
  std::string where = json_string(program + (rank != nullptr ? std::string(" (rank ") + rank + ")" : std::string()));
  where = where.substr(1, where.size() - 2).substr(0, sizeof(f.where) - 1);
  std::strcpy(f.where, where.c_str());
  struct sigaction sa {};
  sa.sa_handler = detail::on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
}

}  // namespace lockstep::cli
