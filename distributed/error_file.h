// distributed/error_file.h — torchrun's error file: when a rank fails under
// torchrun (or lockstep-run), the launcher shows lockstep's message instead of
// "exitcode 1" or "Signal 6".
//
// § Note [TORCHELASTIC_ERROR_FILE]
// torchrun's agent gives each worker TORCHELASTIC_ERROR_FILE, a path to write
// when it fails, and reads it after the worker exits (lockstep-run does the
// same: Note [First failure] in tools/lockstep_run.cpp). The format is what
// PyTorch's ErrorHandler.record_exception writes
// (torch/distributed/elastic/multiprocessing/errors/error_handler.py):
//   {"message": {"message": "<type>: <what>",
//                "extraInfo": {"py_callstack": "<text>", "timestamp": "<unix s>"}}}
// torchrun prints py_callstack as the failure's "traceback" (there is no Python
// stack: lockstep puts the program, the rank and the message there). Three
// paths write it; without the variable none does anything, and writing is best
// effort: a failure to write never hides the original error.
// - The library: init_process_group installs install_terminate_handler(), so
//   a user's program that lets an ls::Error (any std::exception) escape main,
//   or a thread, prints "PROG (rank R): terminate called after an uncaught
//   lockstep::Error: what" and writes the file before it aborts (SIGABRT).
// - The project's programs (tools/cli.h): cli::run (an exception escaping a
//   program, exit 1) and Program::usage_error (exit 2) call write_error_file().
// - A fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) writes "fatal
//   signal SIGSEGV" the same way: Program's constructor calls
//   catch_fatal_signals(), whose handler only uses async-signal-safe calls
//   (open, write, close, clock_gettime) on text prepared beforehand, then dies
//   of the same signal (the exit status torchrun reports is unchanged). The
//   terminate handler resets SIGABRT's handler first, so its message is kept.
// Header-only except install_terminate_handler (error_file.cpp): lockstep-run,
// which links no lockstep library, includes it through tools/cli.h.
// Read before: core/error.h. Read next: distributed/init.h (where the terminate
// handler is installed), tools/cli.h; torchrun reads the file in its ProcessFailure.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <string>
#include <typeinfo>

namespace lockstep::distributed {

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

// The "<type>: <what>" of an error file in the format above (lockstep-run shows it), or ""
// when the file is missing or not in that format. Reads the first "message" string that
// follows {"message": {, and decodes its JSON escapes (\uXXXX below 0x80 only; others
// become '?').
inline std::string read_error_file_message(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return "";
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() < (1u << 20);) text.append(buf, n);
  std::fclose(f);
  const size_t outer = text.find("\"message\"");
  const size_t inner = outer == std::string::npos ? outer : text.find("\"message\"", outer + 9);
  if (inner == std::string::npos) return "";
  size_t i = text.find_first_not_of(" \t\r\n:", inner + 9);
  if (i == std::string::npos || text[i] != '"') return "";
  std::string out;
  for (++i; i < text.size() && text[i] != '"'; ++i) {
    if (text[i] != '\\') {
      out += text[i];
      continue;
    }
    if (++i >= text.size()) break;
    switch (text[i]) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'b': case 'f': break;
      case 'u': {
        const unsigned long code = i + 4 < text.size() ? std::strtoul(text.substr(i + 1, 4).c_str(), nullptr, 16) : 0;
        out += code > 0 && code < 0x80 ? static_cast<char>(code) : '?';
        i += 4;
        break;
      }
      default: out += text[i];  // \" \\ \/
    }
  }
  return out;
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

// The name torchrun's "Root Cause" shows for an exception's type.
inline std::string error_kind(const std::exception& e) {
  const std::string type = typeid(e).name();
  // Itanium-mangled names: lockstep::Error is "N8lockstep5ErrorE".
  if (type.find("8lockstep5Error") != std::string::npos) return "lockstep::Error";
  if (type.find("bad_alloc") != std::string::npos) return "std::bad_alloc (out of memory)";
  return "std::exception";
}

// Installs, once per process, a std::terminate handler that reports the exception being
// terminated on (stderr and TORCHELASTIC_ERROR_FILE) before it aborts. Called by
// init_process_group; a program may call it itself earlier.
void install_terminate_handler();

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

}  // namespace lockstep::distributed
