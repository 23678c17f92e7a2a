// examples/train_checkpoint.h — the checkpoint file of the training examples
// (train_fashion_mnist, train_ddp) and what --resume means: the run's
// hyper-parameters kept beside the weights, resolved
// against the command line on resume, and the checks made before training.
//
// § Note [Resume semantics]
// - Without --resume, an existing checkpoint is never overwritten: the program
//   refuses (exit 2) unless --overwrite is given. With --resume the file must
//   exist (exit 2 otherwise); --resume auto resumes when it exists and
//   otherwise says "no checkpoint found at PATH, starting fresh".
// - Before anything is trained, the checkpoint's directory is probed by
//   creating and removing a file there, so a missing or unwritable directory
//   fails at once, not after the first epoch.
// - The checkpoint records the run's hyper-parameters (--epochs --batch --lr
//   --schedule --seed --limit). On resume, one not given on the command line is
//   the checkpoint's, so a bare --resume continues the same run. One given
//   explicitly applies from the next epoch on, and when it differs from the
//   checkpoint's a line says so ("resume: --lr 1e-07 replaces the checkpoint's
//   0.05 from epoch 2 on"); the result then no longer equals an uninterrupted
//   run. The optimizer's own state (momentum buffers) always comes from the file.
// - The checkpoint also records how the run computed (RunSettings: the number of
//   ranks, --amp, --deterministic). A resume that changes one says so in a line
//   ("resume: the checkpoint was written by 2 rank(s), this run has 1 ..."): the
//   run goes on, but no longer equals an uninterrupted one.
// - A checkpoint whose metadata was edited is refused by its checksum (Note
//   [Checkpoint checksum] in nn/serialize.h); one whose weights or optimizer
//   state hold a NaN or an infinity is refused naming the tensor (check_finite);
//   a --checkpoint that is not a regular file (a FIFO, a device) is refused
//   before it is opened; a symbolic link is followed and its target replaced.
// - One run at a time writes a checkpoint: Note [Checkpoint lock] in
//   examples/checkpoint_lock.h.
// Read before: nn/serialize.h, distributed/checkpoint.h.
// Read next: examples/train_run.h (the decision made before training, restarts).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include <lockstep.h>

#include "tools/cli.h"

namespace train {

// The hyper-parameters a checkpoint records (Note [Resume semantics]).
struct HyperParameters {
  int64_t epochs = 4, batch = 64, limit = 0;
  double lr = 0.05;
  std::string schedule = "constant";
  uint64_t seed = 0;
};

// One hyper-parameter: its flag, its value as text, and how to set it from text.
struct Field {
  const char* flag;
  std::string text;
  std::function<bool(const std::string&)> assign;  // false when the text is malformed
};

inline std::vector<Field> fields(HyperParameters& h) {
  auto int_field = [](const char* flag, auto& v) {
    return Field{flag, std::to_string(v), [&v](const std::string& t) {
                   auto x = lockstep::cli::parse_integer(t);
                   if (x && *x >= 0) v = static_cast<std::remove_reference_t<decltype(v)>>(*x);
                   return x && *x >= 0;
                 }};
  };
  char lr[32];  // the shortest text that reads back as the same double
  *std::to_chars(lr, lr + sizeof lr - 1, h.lr).ptr = '\0';
  return {int_field("--epochs", h.epochs), int_field("--batch", h.batch), int_field("--limit", h.limit),
          Field{"--lr", lr, [&h](const std::string& t) {
                  auto x = lockstep::cli::parse_real(t);
                  if (x && *x > 0) h.lr = *x;
                  return x && *x > 0;
                }},
          Field{"--schedule", h.schedule, [&h](const std::string& t) {
                  if (t == "constant" || t == "cosine") h.schedule = t;
                  return t == "constant" || t == "cosine";
                }},
          int_field("--seed", h.seed)};
}

// How a run computes, besides its hyper-parameters: what a resume may change, but not
// without changing the result (Note [Resume semantics]: a line says so).
struct RunSettings {
  int world_size = 1;
  std::string amp = "off";  // --amp
  bool deterministic = false;  // --deterministic
};

// The metadata a checkpoint carries: "epochs_done", "hparams.<flag without -->" and
// "run.world_size", "run.amp", "run.deterministic".
inline lockstep::nn::Metadata to_metadata(HyperParameters h, int64_t epochs_done, const RunSettings& run) {
  lockstep::nn::Metadata meta{{"epochs_done", std::to_string(epochs_done)},
                              {"run.world_size", std::to_string(run.world_size)},
                              {"run.amp", run.amp},
                              {"run.deterministic", run.deterministic ? "1" : "0"}};
  for (const Field& f : fields(h)) meta[std::string("hparams.") + (f.flag + 2)] = f.text;
  return meta;
}

// Note [Resume semantics]: one line on `out` for each RunSettings value that differs
// from the checkpoint's (a file that records none says nothing).
inline void announce_run_changes(const lockstep::nn::Metadata& meta, const RunSettings& run, int64_t epochs_done,
                                 std::FILE* out) {
  const long long next = static_cast<long long>(epochs_done + 1);
  auto differs = [&](const char* key, const std::string& now) {
    auto it = meta.find(key);
    return it != meta.end() && it->second != now ? it->second : std::string();
  };
  if (const std::string was = differs("run.world_size", std::to_string(run.world_size)); !was.empty()) {
    std::fprintf(out, "resume: the checkpoint was written by %s rank(s), this run has %d: from epoch %lld on each "
                 "step sees a different global batch and data order, so the result differs from an "
                 "uninterrupted run\n", was.c_str(), run.world_size, next);
  }
  if (const std::string was = differs("run.amp", run.amp); !was.empty()) {
    std::fprintf(out, "resume: the checkpoint was written with --amp %s, this run uses --amp %s from epoch %lld "
                 "on; the result differs from an uninterrupted run\n", was.c_str(), run.amp.c_str(), next);
  }
  if (const std::string was = differs("run.deterministic", run.deterministic ? "1" : "0"); !was.empty()) {
    std::fprintf(out, "resume: the checkpoint was written with --deterministic %s, this run uses --deterministic "
                 "%d from epoch %lld on; gradients are summed in another order, so the bytes differ from an "
                 "uninterrupted run\n", was.c_str(), run.deterministic ? 1 : 0, next);
  }
}

// Throws naming the first tensor of a checkpoint that holds a NaN or an infinity: training
// on it would spread NaN to every weight and overwrite the file with it.
inline void check_finite(const std::map<std::string, lockstep::Tensor>& tensors, const std::string& path) {
  for (const auto& [name, t] : tensors) {
    if (!lockstep::is_floating_point(t.dtype()) || t.numel() == 0) continue;
    const lockstep::Tensor values = t.to(lockstep::kFloat64).contiguous();  // (numel) as doubles
    const double* p = values.data_ptr<double>();
    for (int64_t i = 0; i < values.numel(); ++i) {
      LS_CHECK(std::isfinite(p[i]), "checkpoint ", path, ": tensor '", name, "' holds ", std::isnan(p[i]) ? "NaN" :
               "an infinity", " (element ", i, "): the run that wrote it diverged. Training on it would only "
               "spread it; resume from an earlier checkpoint, or start fresh (--overwrite) with a lower --lr");
    }
  }
}

// The finished epoch count of a checkpoint; throws naming the file when it is missing or malformed.
// `program` is the example's name, for the message.
inline int64_t epochs_done(const lockstep::nn::Metadata& meta, const std::string& path, const std::string& program) {
  auto it = meta.find("epochs_done");
  LS_CHECK(it != meta.end(), "checkpoint ", path, " has no epochs_done metadata; it was not written by ", program,
           " (run without --resume, with --overwrite, to start fresh)");
  const auto n = lockstep::cli::parse_integer(it->second);
  LS_CHECK(n && *n >= 0, "checkpoint ", path, ": epochs_done '", it->second, "' is not a whole number >= 0; "
           "the file is damaged or not from ", program);
  return *n;
}

// Note [Resume semantics]: the checkpoint's hyper-parameters, replaced by those
// in `given` (flags given on the command line, with `cli` holding their values).
// Prints a line on `out` (when not null) for each replaced value that differs.
inline HyperParameters resolve_on_resume(const HyperParameters& cli, const std::vector<std::string>& given,
                                         const lockstep::nn::Metadata& meta, const std::string& path,
                                         int64_t epochs_done, const std::string& program, std::FILE* out) {
  HyperParameters from_file = cli;
  HyperParameters from_cli = cli;
  std::vector<Field> theirs = fields(from_file), ours = fields(from_cli);
  bool recorded = false;
  for (const Field& f : theirs) {
    auto it = meta.find(std::string("hparams.") + (f.flag + 2));
    if (it == meta.end()) continue;
    recorded = true;
    LS_CHECK(f.assign(it->second), "checkpoint ", path, ": hparams.", f.flag + 2, " '", it->second,
             "' is malformed; the file is damaged or not from ", program);
  }
  if (!recorded) {
    if (out) std::fprintf(out, "resume: %s records no hyper-parameters (an older file); using the command line's\n",
                          path.c_str());
    return cli;
  }
  HyperParameters result = from_file;
  std::vector<Field> fields_result = fields(result);
  theirs = fields(from_file);
  for (size_t i = 0; i < ours.size(); ++i) {
    if (std::find(given.begin(), given.end(), ours[i].flag) == given.end()) continue;
    fields_result[i].assign(ours[i].text);
    if (out && ours[i].text != theirs[i].text) {
      std::fprintf(out, "resume: %s %s replaces the checkpoint's %s from epoch %lld on\n", ours[i].flag,
                   ours[i].text.c_str(), theirs[i].text.c_str(), static_cast<long long>(epochs_done + 1));
    }
  }
  return result;
}

// Creates and removes a file beside `path`; "" when that works, else why not.
inline std::string probe_writable(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path parent = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  std::error_code ec;
  if (!fs::is_directory(parent, ec)) {
    return "the checkpoint's directory '" + parent.string() + "' does not exist (create it, or choose another "
           "--checkpoint)";
  }
  if (fs::is_directory(path, ec)) return "--checkpoint " + path + " is a directory; name a file";
  // A FIFO or a device would block or be replaced by a file (symbolic links are followed).
  if (const fs::file_status st = fs::status(path, ec); fs::exists(st) && !fs::is_regular_file(st)) {
    return "--checkpoint " + path + " is not a regular file (a FIFO, a socket or a device); name a file";
  }
  const std::string probe = path + ".probe." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    return "cannot write the checkpoint into '" + parent.string() + "': " + std::strerror(errno) +
           " (choose another --checkpoint)";
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

}  // namespace train
