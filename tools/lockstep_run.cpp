// tools/lockstep_run.cpp — lockstep-run, the torchrun-style launcher.
//
//   lockstep-run --nproc-per-node N [--nnodes M --node-rank K
//                --master-addr A --master-port P] -- prog args...
//
// Starts N copies of prog on this machine (fork + exec), copy i with
//   RANK = K*N + i   WORLD_SIZE = M*N   LOCAL_RANK = i   LOCAL_WORLD_SIZE = N
//   GROUP_RANK = K   MASTER_ADDR = A   MASTER_PORT = P
// — what distributed/rendezvous.h reads. Every line a rank prints goes to our
// stdout (or stderr) prefixed "[rank R] ". SIGINT/SIGTERM sent to the launcher
// are forwarded to every rank. When a rank exits non-zero or dies by a signal,
// the others get SIGTERM, then SIGKILL after a grace period, and the launcher
// reports "lockstep-run: rank R failed first (...)" and exits non-zero (the
// rank's exit status, or 128 + signal); among ranks found dead at the same
// moment, one killed by a signal counts as first. Exit 0 when every rank succeeds.
//
// § Note [Restarts]
// With --max-restarts N, a failed attempt (a rank exited non-zero or died by a
// signal; the others stopped as above) is followed by a new one that starts
// every rank of this node again, up to N times, as torchrun --max-restarts
// does. Each rank gets TORCHELASTIC_RESTART_COUNT (0 on the first attempt, k
// on the k-th restart) and TORCHELASTIC_MAX_RESTARTS, torchrun's variables, so
// a program resumes the same way under either launcher (train_fashion_mnist:
// a restart resumes from its checkpoint, as '--resume auto'). Rank 0 hosts a
// fresh store each attempt, on the same MASTER_PORT. With --nnodes > 1 each
// node's launcher restarts its own ranks: give every node the same
// --max-restarts (the ranks of the other nodes fail once the store is gone, so
// their launchers restart too). An interrupt (SIGINT/SIGTERM) never restarts.
//
// § Note [First failure]
// When ranks fail, one is usually the cause and the others its consequence (they saw a
// dead peer). Each rank gets TORCHELASTIC_ERROR_FILE, a file of its own in a directory the
// launcher creates and removes (Note [TORCHELASTIC_ERROR_FILE] in distributed/error_file.h:
// the library, cli::run and the fatal-signal handler write it), so the launcher can say
// which failed first and why: the rank reaped first (within one pass, one killed by a
// signal), unless another failed rank's error file is older than that rank's own — the
// file says when a rank failed, reaping only when the launcher noticed. A rank killed
// without a word (SIGKILL) has no file and keeps its place. The final line then carries
// the chosen rank's message: "lockstep-run: rank 1 failed first (signal SIGABRT):
// lockstep::Error: ...".
//
// One thread, one poll() loop: it reads every rank's pipes, a self-pipe that
// the signal handler writes to (SIGCHLD, SIGINT, SIGTERM), and reaps children.
// Each rank runs in its own process group, so signals reach a shell's children
// too (`sh -c 'sleep 30'` dies whole) and no orphan keeps a pipe open.
// Deliberately plain C++ and POSIX: it links no lockstep library (tools/cli.h, its
// command line, is header-only on CLI11).
// Read before: distributed/rendezvous.h (the variables), README.md (usage).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "tools/cli.h"
#include "tools/launch_threads.h"

namespace {


std::string signal_name(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    default: return "signal " + std::to_string(sig);
  }
}

struct Options {
  long nproc = 0, nnodes = 1, node_rank = 0, master_port = 29500;
  std::string master_addr = "127.0.0.1";
  double grace_s = 5.0;
  long max_restarts = 0;
  std::vector<std::string> command;
};

Options parse_args(int argc, char** argv) {
  Options o;
  lockstep::cli::Program p("lockstep-run",
                           "Starts N processes of `prog` on this machine, as ranks of a world of M*N, with RANK, "
                           "WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR and MASTER_PORT set "
                           "(what ls::distributed::init_process_group reads). Output lines are prefixed \"[rank R] \".\n"
                           "usage: lockstep-run --nproc-per-node N [options] [--] prog [args...]");
  p.integer("--nproc-per-node,--nproc_per_node", o.nproc, "processes on this node", 1, 4096)->required();
  p.integer("--nnodes", o.nnodes, "nodes in the job; run lockstep-run once per node", 1, 1 << 20);
  p.integer("--node-rank,--node_rank", o.node_rank, "this node's index in [0, nnodes)", 0, 1 << 20);
  p.text("--master-addr,--master_addr", o.master_addr, "address of the node running rank 0");
  p.integer("--master-port,--master_port", o.master_port, "free TCP port there for the rendezvous store", 1, 65535);
  p.real("--grace-period,--grace_period", o.grace_s, "seconds between SIGTERM and SIGKILL when stopping ranks", 0.0,
         3600.0);
  p.integer("--max-restarts,--max_restarts", o.max_restarts,
            "after a rank fails, stop the others and start every rank again, up to this many times", 0, 1000000);
  p.app().prefix_command();  // the program and its arguments start at the first positional (or after --)
  p.app().footer("SIGINT/SIGTERM are forwarded to every rank. If a rank fails (non-zero exit or a signal) the "
                 "others are stopped and lockstep-run exits non-zero, naming the rank that failed first; with "
                 "--max-restarts N it starts every rank again instead, up to N times, with "
                 "TORCHELASTIC_RESTART_COUNT set to the attempt (0 first).\n" +
                 p.app().get_footer());
  p.parse(argc, argv);
  o.command = p.app().remaining();
  if (!o.command.empty() && o.command.front() == "--") {
    o.command.erase(o.command.begin());
  } else if (!o.command.empty() && o.command.front().rfind("-", 0) == 0) {
    // prefix_command() hands an unknown option over as the program: refuse it instead.
    p.usage_error("unknown option '" + o.command.front() + "' (the program's own options go after it)");
  }
  if (o.node_rank >= o.nnodes) {
    p.usage_error("--node-rank " + std::to_string(o.node_rank) + " but --nnodes " + std::to_string(o.nnodes) +
                  ": the node rank must be in [0, nnodes)");
  }
  if (o.command.empty()) {
    p.usage_error("no program given: put it after `--`, e.g. lockstep-run --nproc-per-node 2 -- ./train");
  }
  return o;
}

// ---- error files (Note [First failure]) ---------------------------------------

std::string g_error_dir;  // created by main, removed at exit

std::string error_file(int rank) { return g_error_dir + "/rank_" + std::to_string(rank) + ".json"; }

// When `rank`'s error file was written, or nullopt when it has none.
std::optional<timespec> error_file_time(int rank) {
  struct stat st {};
  if (::stat(error_file(rank).c_str(), &st) != 0) return std::nullopt;
  return st.st_mtim;
}

bool earlier(const timespec& a, const timespec& b) {
  return a.tv_sec != b.tv_sec ? a.tv_sec < b.tv_sec : a.tv_nsec < b.tv_nsec;
}

// ---- signals -----------------------------------------------------------------

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  (void)!::write(g_signal_pipe[1], &b, 1);
  errno = saved;
}

void install_handlers() {
  if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    std::perror("lockstep-run: pipe");
    std::exit(1);
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

// ---- ranks -------------------------------------------------------------------

// One output stream of one rank: a pipe and the partial line read so far.
struct Stream {
  int fd = -1;
  int out = 1;  // where its lines go: 1 (stdout) or 2 (stderr)
  std::string partial;
};

struct Rank {
  int rank = 0;
  pid_t pid = -1;  // also its process group id
  bool running = false;
  int status = 0;
  Stream streams[2];
};

void write_fully(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// Emits complete lines of `s` with the rank prefix; `flush` also emits a final partial line.
void emit(Rank& r, Stream& s, bool flush) {
  const std::string prefix = "[rank " + std::to_string(r.rank) + "] ";
  std::string out;
  size_t start = 0;
  for (size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    out += prefix;
    out.append(s.partial, start, nl + 1 - start);
  }
  s.partial.erase(0, start);
  if ((flush || s.partial.size() > 65536) && !s.partial.empty()) {
    out += prefix + s.partial + "\n";
    s.partial.clear();
  }
  if (!out.empty()) write_fully(s.out, out);
}

// Reads what is available; closes the stream at EOF.
void drain(Rank& r, Stream& s) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(s.fd, buf, sizeof(buf));
    if (n > 0) {
      s.partial.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      ::close(s.fd);
      s.fd = -1;
      emit(r, s, true);
      return;
    }
    break;  // EAGAIN
  }
  emit(r, s, false);
}

void spawn(Rank& r, const Options& o, long attempt) {
  int pipes[2][2];
  for (auto& p : pipes) {
    if (::pipe2(p, O_CLOEXEC) != 0) {
      std::perror("lockstep-run: pipe");
      std::exit(1);
    }
  }
  const long local = r.rank - o.node_rank * o.nproc;
  // Block signals across fork: until the child has reset its handlers, a signal
  // would run our handler in the child and write to our signal pipe.
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &old);
  pid_t pid = ::fork();
  if (pid != 0) sigprocmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) {
    std::perror("lockstep-run: fork");
    std::exit(1);
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(pipes[0][1], 1);
    ::dup2(pipes[1][1], 2);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaction(sig, &dfl, nullptr);
    sigprocmask(SIG_SETMASK, &old, nullptr);
    setenv("RANK", std::to_string(r.rank).c_str(), 1);
    setenv("WORLD_SIZE", std::to_string(o.nproc * o.nnodes).c_str(), 1);
    setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
    setenv("LOCAL_WORLD_SIZE", std::to_string(o.nproc).c_str(), 1);
    setenv("GROUP_RANK", std::to_string(o.node_rank).c_str(), 1);
    setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
    setenv("MASTER_PORT", std::to_string(o.master_port).c_str(), 1);
    // Note [Restarts]: torchrun's names, so a program reads one variable under either launcher.
    setenv("TORCHELASTIC_RESTART_COUNT", std::to_string(attempt).c_str(), 1);
    setenv("TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts).c_str(), 1);
    if (!g_error_dir.empty()) setenv("TORCHELASTIC_ERROR_FILE", error_file(r.rank).c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : o.command) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "lockstep-run: cannot run '%s': %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from here, so the group exists before we ever signal it
  r.pid = pid;
  r.running = true;
  for (int k = 0; k < 2; ++k) {
    ::close(pipes[k][1]);
    r.streams[k].fd = pipes[k][0];
    r.streams[k].out = k + 1;
    ::fcntl(r.streams[k].fd, F_SETFL, ::fcntl(r.streams[k].fd, F_GETFL) | O_NONBLOCK);
  }
}

void signal_all(std::vector<Rank>& ranks, int sig) {
  for (auto& r : ranks) {
    if (r.running) ::kill(-r.pid, sig);  // the rank's process group, by its id
  }
}

std::string describe(int status) {
  if (WIFSIGNALED(status)) return "signal " + signal_name(WTERMSIG(status));
  return "exit status " + std::to_string(WEXITSTATUS(status));
}

// How one attempt ended: every rank succeeded, the launcher was interrupted, or a rank failed first.
struct Outcome {
  int interrupted = 0;  // the signal the launcher received, if any
  int failed_rank = -1;
  int failed_status = 0;
  std::string message;  // the failed rank's error file's message, if it wrote one
};

// Starts every rank of this node, runs the poll loop until all have exited.
Outcome run_attempt(const Options& o, long attempt) {
  std::vector<Rank> ranks(static_cast<size_t>(o.nproc));
  for (long i = 0; i < o.nproc; ++i) {
    ranks[i].rank = static_cast<int>(o.node_rank * o.nproc + i);
    if (!g_error_dir.empty()) ::unlink(error_file(ranks[i].rank).c_str());  // the previous attempt's
    spawn(ranks[i], o, attempt);
  }
  using Clock = std::chrono::steady_clock;
  const auto grace = std::chrono::milliseconds(static_cast<long>(o.grace_s * 1000));
  int running = static_cast<int>(ranks.size());
  int failed = -1;       // index of the rank that failed first
  int interrupted = 0;   // the signal the launcher received, if any
  bool stopping = false;
  Clock::time_point kill_at{};
  Clock::time_point drain_until = Clock::time_point::max();  // after the last exit: stop waiting for orphans

  auto start_stopping = [&](int sig) {
    signal_all(ranks, sig);
    if (!stopping) kill_at = Clock::now() + grace;
    stopping = true;
  };

  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<size_t, int>> owners;
    fds.push_back({g_signal_pipe[0], POLLIN, 0});
    for (size_t i = 0; i < ranks.size(); ++i) {
      for (int k = 0; k < 2; ++k) {
        if (ranks[i].streams[k].fd < 0) continue;
        fds.push_back({ranks[i].streams[k].fd, POLLIN, 0});
        owners.push_back({i, k});
      }
    }
    if (running == 0 && (owners.empty() || Clock::now() >= drain_until)) break;
    int wait_ms = 200;
    if (stopping && running > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(kill_at - Clock::now()).count();
      wait_ms = static_cast<int>(std::max<long>(0, std::min<long>(left, wait_ms)));
    }
    ::poll(fds.data(), fds.size(), wait_ms);

    for (size_t j = 1; j < fds.size(); ++j) {
      if (fds[j].revents) drain(ranks[owners[j - 1].first], ranks[owners[j - 1].first].streams[owners[j - 1].second]);
    }
    unsigned char sigs[64];
    ssize_t n = ::read(g_signal_pipe[0], sigs, sizeof(sigs));
    for (ssize_t k = 0; k < n; ++k) {
      if (sigs[k] == SIGINT || sigs[k] == SIGTERM || sigs[k] == SIGHUP) {
        if (!interrupted) interrupted = sigs[k];
        start_stopping(sigs[k]);
      }
    }
    // Ranks that failed since the last pass. When several are reaped together,
    // one killed by a signal is named first: a crash is the likelier cause, and
    // the others' error exits its consequence (they saw the dead peer).
    std::vector<int> failed_now;
    for (size_t i = 0; i < ranks.size(); ++i) {
      Rank& r = ranks[i];
      if (!r.running) continue;
      // Peek first (WNOWAIT): while the rank is an unreaped zombie its id cannot be
      // reused, so killing its process group below cannot hit a stranger.
      siginfo_t info{};
      if (::waitid(P_PID, static_cast<id_t>(r.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
          info.si_pid != r.pid) {
        continue;
      }
      ::kill(-r.pid, SIGKILL);  // whatever the rank left behind in its group
      int status = 0;
      ::waitpid(r.pid, &status, 0);
      r.running = false;
      r.status = status;
      --running;
      bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok) failed_now.push_back(static_cast<int>(i));
      if (running == 0) drain_until = Clock::now() + std::chrono::milliseconds(500);
    }
    if (!failed_now.empty() && failed < 0 && !interrupted) {
      failed = failed_now[0];
      for (int i : failed_now) {
        if (WIFSIGNALED(ranks[i].status)) {
          failed = i;
          break;
        }
      }
      start_stopping(SIGTERM);
    }
    if (stopping && running > 0 && Clock::now() >= kill_at) signal_all(ranks, SIGKILL);
  }
  for (auto& r : ranks) {
    for (auto& s : r.streams) {
      if (s.fd >= 0) {
        emit(r, s, true);
        ::close(s.fd);
      }
    }
  }

  Outcome out;
  out.interrupted = interrupted;
  if (failed >= 0) {
    // Note [First failure]: an older error file of another failed rank names the cause.
    if (std::optional<timespec> first = error_file_time(ranks[failed].rank)) {
      for (size_t i = 0; i < ranks.size(); ++i) {
        const bool ok = WIFEXITED(ranks[i].status) && WEXITSTATUS(ranks[i].status) == 0;
        const std::optional<timespec> t = ok ? std::nullopt : error_file_time(ranks[i].rank);
        if (t && earlier(*t, *first)) {
          failed = static_cast<int>(i);
          first = t;
        }
      }
    }
    out.failed_rank = ranks[failed].rank;
    out.failed_status = ranks[failed].status;
    if (!g_error_dir.empty()) out.message = lockstep::distributed::read_error_file_message(error_file(out.failed_rank));
  }
  for (const Rank& r : ranks) {
    if (!g_error_dir.empty()) ::unlink(error_file(r.rank).c_str());
  }
  return out;
}

// The directory of the ranks' error files (Note [First failure]); "" when it cannot be
// made (the launcher then works as before, without the ranks' messages).
std::string make_error_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/lockstep-run.XXXXXX";
  return ::mkdtemp(pattern.data()) != nullptr ? pattern : std::string();
}

int run_attempts(const Options& o) {
  for (long attempt = 0;; ++attempt) {
    const Outcome out = run_attempt(o, attempt);
    if (out.interrupted) {
      std::fprintf(stderr, "lockstep-run: received %s, forwarded it to every rank\n",
                   signal_name(out.interrupted).c_str());
      return 128 + out.interrupted;
    }
    if (out.failed_rank < 0) return 0;
    const int status = out.failed_status;
    if (attempt < o.max_restarts) {
      // Note [Restarts]: every rank of this node starts again, attempt + 1.
      std::fprintf(stderr, "lockstep-run: rank %d failed first (%s)%s; stopped the other ranks; restarting all "
                   "ranks (restart %ld of %ld)\n", out.failed_rank, describe(status).c_str(),
                   out.message.empty() ? "" : (": " + out.message).c_str(), attempt + 1, o.max_restarts);
      continue;
    }
    std::fprintf(stderr, "lockstep-run: rank %d failed first (%s)%s; stopped the other ranks%s\n", out.failed_rank,
                 describe(status).c_str(), out.message.empty() ? "" : (": " + out.message).c_str(),
                 o.max_restarts > 0 ? (" (no restarts left of " + std::to_string(o.max_restarts) + ")").c_str() : "");
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse_args(argc, argv);
  lockstep::launcher::set_rank_threads(o.nproc, lockstep::launcher::available_cpus());  // Note [Oversubscribed ranks]
  install_handlers();
  g_error_dir = make_error_dir();
  const int status = run_attempts(o);
  if (!g_error_dir.empty()) ::rmdir(g_error_dir.c_str());
  return status;
}
