// examples/train_run.h — what the checkpointing examples (train_fashion_mnist, train_ddp)
// share around their training loop: the --checkpoint / --resume / --overwrite options, the
// decision made before training (fresh, resumed, or resumed because a launcher restarted
// the job), the one-file model + optimizer checkpoint, and the test-only SIGKILL.
//
// § Note [Resuming on a restart]
// A launcher that restarts a failed job (torchrun --max-restarts, lockstep-run
// --max-restarts: Note [Restarts] in tools/lockstep_run.cpp) starts every rank again with
// TORCHELASTIC_RESTART_COUNT > 0 (ls::distributed::restart_count()). A run without --resume
// then resumes as '--resume auto' (--overwrite no longer applies: the file is the failed
// attempt's own checkpoint), so the job continues from its last complete checkpoint and,
// because the data order depends only on (seed, epoch) and everything else is in the file,
// ends with the same checkpoint bytes as an uninterrupted run.
//
// Bit for bit, that holds for any model with 2 ranks, and with more ranks for buckets below
// the Gloo ring threshold (train_ddp's MLP). Otherwise the resumed run's first step sums
// each gradient in another order: DDP's first iteration uses its initial bucket layout and
// later ones the rebuilt one, which is not in the checkpoint, and a ring AllReduce over
// more than 2 ranks adds an element's contributions in an order that depends on its offset
// in the bucket — the weights then agree up to rounding only. `--deterministic 1`
// (DDPOptions().deterministic: Note [Deterministic reduction]) sums in rank order whatever
// the layout, so the bytes match for any number of ranks.
//
// Fault injection, for tests only: LOCKSTEP_TEST_SIGKILL_AT=R:E:S makes rank R kill itself
// with SIGKILL just before step S (1-based) of epoch E (1-based), as if the machine had
// killed it; on the first attempt only (not after a launcher's restart).
// LOCKSTEP_TEST_DIVERGE_AT=R:E:weights|step makes rank R's replica part from the others' at
// the end of epoch E (1-based), just before its checkpoint: `weights` nudges the model's last
// parameter, `step` takes one more optimizer step; the replica check then refuses the
// checkpoint (Note [Replica check at checkpoints]).
// Read before: examples/train_checkpoint.h (Note [Resume semantics]), distributed/checkpoint.h.
// Read next: examples/train_ddp.cpp, examples/train_fashion_mnist.cpp.
#pragma once

#include <signal.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <lockstep.h>

#include "examples/checkpoint_lock.h"
#include "examples/train_checkpoint.h"
#include "tools/cli.h"

namespace train {

inline constexpr const char* kDeterministicHelp =
    "1: DDP sums every gradient in rank order (DDPOptions().deterministic, more traffic above 2 ranks), so "
    "a resumed or restarted run ends with the uninterrupted run's checkpoint bytes for any number of ranks";

struct CheckpointArgs {
  std::string checkpoint;
  std::string resume = "off";  // off | on | auto ("" from the command line: a bare --resume, i.e. on)
  bool overwrite = false;
};

// --checkpoint, --resume [auto], --overwrite (Note [Resume semantics]).
inline void add_checkpoint_options(lockstep::cli::Program& p, CheckpointArgs& a) {
  p.text("--checkpoint", a.checkpoint, "checkpoint file, written after every epoch");
  auto* resume = p.app()
                     .add_option("--resume", a.resume,
                                 "continue from --checkpoint, which must exist; '--resume auto' starts fresh when "
                                 "it does not. Hyper-parameters not given are the checkpoint's; one given applies "
                                 "from the next epoch on, and a line says when it differs")
                     ->expected(0, 1)
                     ->default_str("")  // a bare --resume gives "" (else CLI11 would take the default, "off")
                     ->check(CLI::Validator(
                         [](std::string& t) {
                           return t.empty() || t == "auto" ? std::string() : "expected nothing or 'auto', got '" + t + "'";
                         },
                         "", "resume"))
                     ->type_name("[auto]");
  p.flag("--overwrite", a.overwrite, "replace an existing --checkpoint (without it a fresh run refuses to)")
      ->excludes(resume);
  p.app().footer("A fresh run refuses to overwrite an existing checkpoint (use --resume or --overwrite), and\n"
                 "checks that the checkpoint's directory is writable before training. Restarted by a launcher\n"
                 "(TORCHELASTIC_RESTART_COUNT > 0) it resumes as '--resume auto'.\n" +
                 p.app().get_footer());
}

// The hyper-parameter flags (those of fields()) given on the command line, after parse().
inline std::vector<std::string> given_flags(lockstep::cli::Program& p) {
  HyperParameters unused;
  std::vector<std::string> given;
  for (const Field& f : fields(unused)) {
    if (const CLI::Option* o = p.app().get_option_no_throw(f.flag); o != nullptr && o->count() > 0) {
      given.push_back(f.flag);
    }
  }
  return given;
}

// LOCKSTEP_TEST_SIGKILL_AT=R:E:S: {R, E, S}, or {-1, -1, -1} when unset.
inline std::array<int64_t, 3> sigkill_point() {
  std::array<int64_t, 3> at{-1, -1, -1};
  const char* env = std::getenv("LOCKSTEP_TEST_SIGKILL_AT");
  if (env == nullptr || *env == '\0') return at;
  long long r = 0, e = 0, s = 0;
  char extra = 0;
  LS_CHECK(std::sscanf(env, "%lld:%lld:%lld%c", &r, &e, &s, &extra) == 3,
           "LOCKSTEP_TEST_SIGKILL_AT='", env, "' is not RANK:EPOCH:STEP (e.g. 1:2:5); unset it");
  at = {r, e, s};
  return at;
}

// LOCKSTEP_TEST_DIVERGE_AT=R:E:WHAT (WHAT: weights or step).
struct DivergeAt {
  int64_t rank = -1, epoch = -1;
  std::string what;
};
inline DivergeAt diverge_point() {
  DivergeAt at;
  const char* env = std::getenv("LOCKSTEP_TEST_DIVERGE_AT");
  if (env == nullptr || *env == '\0') return at;
  long long r = 0, e = 0;
  char what[16] = {0};
  LS_CHECK(std::sscanf(env, "%lld:%lld:%15s", &r, &e, what) == 3 &&
               (std::string(what) == "weights" || std::string(what) == "step"),
           "LOCKSTEP_TEST_DIVERGE_AT='", env, "' is not RANK:EPOCH:weights or RANK:EPOCH:step (e.g. 1:2:step); unset it");
  return {r, e, what};
}

// The Gloo process group when a launcher started several ranks (lockstep-run, torchrun:
// WORLD_SIZE; mpirun; srun), else null (one process). A malformed launcher variable is a
// usage error (exit 2) naming it.
inline std::shared_ptr<lockstep::distributed::ProcessGroup> process_group(lockstep::cli::Program& program) {
  const std::optional<int> launched =
      program.environment([] { return lockstep::distributed::launched_world_size(); });
  if (!launched) return nullptr;
  // RANK=abc: exit 2, not 1 — also with WORLD_SIZE=1 (one process, no group), where a
  // missing RANK means rank 0 but a malformed RANK, LOCAL_RANK, MASTER_PORT or
  // LOCKSTEP_TIMEOUT_S is refused all the same.
  program.environment([&] {
    lockstep::distributed::InitOptions options;
    if (*launched == 1 && std::getenv("RANK") == nullptr) options = options.rank(0);
    return lockstep::distributed::resolve_rendezvous(options);
  });
  if (*launched == 1) return nullptr;
  return lockstep::distributed::init_process_group("gloo");
}

// What a run starts from, decided before anything is trained.
struct Start {
  HyperParameters h;                              // the command line's, or resolved against the checkpoint's
  bool resuming = false;
  int64_t first_epoch = 0;                        // epochs the checkpoint has done
  std::map<std::string, lockstep::Tensor> saved;  // the checkpoint's tensors when resuming (load_state)
  std::array<int64_t, 3> kill_at{-1, -1, -1};     // sigkill_point() on the first attempt
  DivergeAt diverge_at;                           // diverge_point()
  RunSettings run;                                // this run's, recorded in every checkpoint it writes
  CheckpointLock lock;                            // rank 0's, held until the run ends (Note [Checkpoint lock])
};

// Note [Resume semantics] and Note [Resuming on a restart]. A bad combination (a missing
// checkpoint under --resume, an existing one without --resume or --overwrite, an
// unwritable directory) is a usage error (exit 2) naming what to do.
inline Start start(lockstep::cli::Program& program, CheckpointArgs a, const HyperParameters& cli,
                   const std::vector<std::string>& given, int rank, const RunSettings& run) {
  Start s;
  s.h = cli;
  s.run = run;
  if (a.resume.empty()) a.resume = "on";  // a bare --resume
  const int restart = program.environment([] { return lockstep::distributed::restart_count(); });
  if (restart == 0) s.kill_at = program.environment([] { return sigkill_point(); });
  s.diverge_at = program.environment([] { return diverge_point(); });
  if (restart > 0 && a.resume == "off") {
    a.resume = "auto";
    a.overwrite = false;
    if (rank == 0) std::printf("restart %d: resuming from --checkpoint when it exists (--resume auto)\n", restart);
  }
  if (rank == 0) {
    if (const std::string why = probe_writable(a.checkpoint); !why.empty()) program.usage_error(why);
    if (const std::string why = s.lock.acquire(a.checkpoint); !why.empty()) program.usage_error(why);
  }
  const bool exists = std::filesystem::exists(a.checkpoint);
  if (a.resume == "on" && !exists) {
    program.usage_error("--resume: no checkpoint at " + a.checkpoint + " to resume from; run without --resume to "
                        "start fresh, or pass '--resume auto' to start fresh when there is none");
  }
  if (a.resume == "auto" && !exists && rank == 0) {
    std::printf("no checkpoint found at %s, starting fresh\n", a.checkpoint.c_str());
  }
  s.resuming = a.resume != "off" && exists;
  if (!s.resuming && exists && !a.overwrite) {
    program.usage_error("the checkpoint " + a.checkpoint + " exists; pass --resume to continue it, --overwrite to "
                        "replace it, or --checkpoint to choose another file");
  }
  if (s.resuming) {
    lockstep::nn::Metadata meta;
    s.saved = lockstep::nn::load_tensors(a.checkpoint, &meta);
    check_finite(s.saved, a.checkpoint);
    s.first_epoch = epochs_done(meta, a.checkpoint, program.name());
    s.h = resolve_on_resume(cli, given, meta, a.checkpoint, s.first_epoch, program.name(),
                            rank == 0 ? stdout : nullptr);
    if (rank == 0) announce_run_changes(meta, run, s.first_epoch, stdout);
  }
  return s;
}

// Every rank must train with the same hyper-parameters: with a different --batch one rank
// ends its epoch early and waits in another collective until the timeout. Rank 0's are
// broadcast; a rank whose differ says which, and every rank throws naming those ranks.
// Two small collectives, once, before training.
inline void check_same_hyper_parameters(const HyperParameters& h, lockstep::distributed::ProcessGroup& pg) {
  auto encode = [](const HyperParameters& x) {  // (6) int64, lr as its bits
    return std::vector<int64_t>{x.epochs, x.batch, x.limit, std::bit_cast<int64_t>(x.lr), x.schedule == "cosine",
                                static_cast<int64_t>(x.seed)};
  };
  auto decode = [&h](const std::vector<int64_t>& v) {
    HyperParameters x = h;
    x.epochs = v[0], x.batch = v[1], x.limit = v[2], x.lr = std::bit_cast<double>(v[3]);
    x.schedule = v[4] ? "cosine" : "constant", x.seed = static_cast<uint64_t>(v[5]);
    return x;
  };
  // Every rank's options on every rank, so each rank's error names every difference
  // (a rank stopped early by the launcher could not say which of its flags differ).
  std::vector<lockstep::Tensor> all;
  pg.allgather(all, lockstep::tensor(encode(h), {6}))->wait(pg.timeout());
  HyperParameters rank0 = decode(all[0].to_vector<int64_t>());
  std::vector<Field> zero = fields(rank0);
  std::string problems;
  for (size_t r = 1; r < all.size(); ++r) {
    HyperParameters theirs = decode(all[r].to_vector<int64_t>());
    std::vector<Field> f = fields(theirs);
    std::string differs;
    for (size_t i = 0; i < f.size(); ++i) {
      if (f[i].text != zero[i].text) {
        differs += std::string(differs.empty() ? "" : ", ") + f[i].flag + " " + f[i].text + " (rank 0: " +
                   zero[i].text + ")";
      }
    }
    if (!differs.empty()) problems += (problems.empty() ? "" : "; ") + ("rank " + std::to_string(r) + " was started with " + differs);
  }
  LS_CHECK(problems.empty(), problems, "; every rank must train with the same hyper-parameters: start them all "
           "with the same options");
}

// Rank `rank` SIGKILLs itself when (epoch, step), both 0-based, is s.kill_at's point.
inline void maybe_kill(const Start& s, int rank, int64_t epoch, int64_t step, const std::string& name) {
  if (rank != s.kill_at[0] || epoch + 1 != s.kill_at[1] || step + 1 != s.kill_at[2]) return;
  std::fprintf(stderr, "%s: LOCKSTEP_TEST_SIGKILL_AT: rank %d kills itself before epoch %lld step %lld\n",
               name.c_str(), rank, static_cast<long long>(epoch + 1), static_cast<long long>(step + 1));
  std::fflush(stderr);
  ::raise(SIGKILL);
}

// The value of a step's loss; throws naming the rank, the epoch and the step (1-based) when
// it (step: 1-based) is a NaN or an infinity, before the epoch's checkpoint can be overwritten with what it
// did to the weights. (One rank's non-finite gradients reach every rank through the
// AllReduce, so every rank's loss is non-finite from the next step on.)
inline double finite_loss(const lockstep::Tensor& loss, int rank, int64_t epoch, int64_t step) {
  const double value = loss.item<double>();
  LS_CHECK(std::isfinite(value), "the loss is ", value, " on rank ", rank, " at epoch ", epoch + 1,
           " step ", step, ": training diverged (a learning rate too high, or bad data). Nothing more is "
           "trained and the checkpoint of the last complete epoch is kept; lower --lr and resume or start again");
  return value;
}

// Rank `rank` makes its replica differ when `epoch` (0-based) ends at s.diverge_at's point.
inline void maybe_diverge(const Start& s, int rank, int64_t epoch, lockstep::nn::Module& model,
                          lockstep::optim::Optimizer& opt, const std::string& name) {
  if (rank != s.diverge_at.rank || epoch + 1 != s.diverge_at.epoch) return;
  std::fprintf(stderr, "%s: LOCKSTEP_TEST_DIVERGE_AT: rank %d changes its %s after epoch %lld\n", name.c_str(), rank,
               s.diverge_at.what == "step" ? "optimizer step count" : "weights", static_cast<long long>(epoch + 1));
  if (s.diverge_at.what == "step") {
    opt.step();
  } else {
    lockstep::NoGradGuard no_grad;
    lockstep::Tensor last = model.parameters().back();
    last.add_(1e-3);
  }
}

// Model and optimizer state in one file: "model.<name>" and "optim.<key>" tensors; the
// finished epoch count and the hyper-parameters in the metadata (to_metadata). Distributed:
// every rank's replica is compared first (ddp->check_replicas(): parameters and the
// registered optimizer's step count, Note [Replica check at checkpoints]) — replicas that
// parted are refused on every rank, naming the ranks and the parameter, and the previous
// checkpoint is kept — then rank 0 writes and every rank waits until the file is complete
// (distributed/checkpoint.h). `ddp` is null in a run of one process.
template <class DDP>
inline void save_checkpoint(const std::string& path, const lockstep::nn::Module& model,
                            const lockstep::optim::Optimizer& opt, const Start& s, int64_t epochs_done,
                            lockstep::distributed::ProcessGroup* pg, DDP* ddp) {
  if (ddp != nullptr) {
    try {
      ddp->check_replicas();
    } catch (const lockstep::Error& e) {
      throw lockstep::Error(lockstep::detail::str("the checkpoint of epoch ", epochs_done, " is not written to ", path,
                                                  " (the last one written stays): ", e.what()));
    }
  }
  std::map<std::string, lockstep::Tensor> all;
  for (auto& [k, v] : model.state_dict()) all["model." + k] = v;
  for (auto& [k, v] : opt.state_dict()) all["optim." + k] = v;
  const lockstep::nn::Metadata meta = to_metadata(s.h, epochs_done, s.run);
  if (pg != nullptr) lockstep::distributed::save_on_rank0(all, path, *pg, meta);
  else lockstep::nn::save_tensors(all, path, meta);
}

// The inverse of save_checkpoint, from Start::saved.
inline void load_state(const std::map<std::string, lockstep::Tensor>& all, lockstep::nn::Module& model,
                       lockstep::optim::Optimizer& opt) {
  lockstep::nn::StateDict model_state;
  lockstep::optim::OptimizerState opt_state;
  for (auto& [k, v] : all) {
    if (k.rfind("model.", 0) == 0) model_state[k.substr(6)] = v;
    if (k.rfind("optim.", 0) == 0) opt_state[k.substr(6)] = v;
  }
  model.load_state_dict(model_state);
  opt.load_state_dict(opt_state);
}

// When resuming: loads Start::saved into `model` and `opt` and frees it, applies the
// resolved lr (Note [Resume semantics]), and says so on rank 0 — also when the
// checkpoint has every epoch done already.
inline void resume(Start& s, const std::string& path, lockstep::nn::Module& model, lockstep::optim::Optimizer& opt,
                   int rank) {
  if (!s.resuming) return;
  load_state(s.saved, model, opt);
  s.saved.clear();
  opt.set_lr(s.h.lr);
  if (rank != 0) return;
  std::printf("resumed from %s after epoch %lld\n", path.c_str(), static_cast<long long>(s.first_epoch));
  if (s.first_epoch >= s.h.epochs) {
    std::printf("nothing to train: the checkpoint has %lld of --epochs %lld; pass a larger --epochs to go on\n",
                static_cast<long long>(s.first_epoch), static_cast<long long>(s.h.epochs));
  }
}

}  // namespace train
