// tools/error_file.h — torchrun's error file: when a program fails under
// torchrun, its "Root Cause" shows lockstep's message instead of "exitcode 1".
//
// Note [TORCHELASTIC_ERROR_FILE]
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
// Header-only, no lockstep libraries (lockstep-run includes tools/cli.h too).
// Read before: tools/cli.h. Read next: torchrun's errors/__init__.py (ProcessFailure).
#pragma once

#include <cstdio>
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

}  // namespace lockstep::cli
