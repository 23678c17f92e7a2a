// tests/support/multiprocess.h — run one test body as several real processes (ranks).
//
// run_ranks(world_size, fn, timeout) forks world_size children, child r runs
// fn(r) with the torchrun variables set —
//   RANK=r  WORLD_SIZE  LOCAL_RANK=r  LOCAL_WORLD_SIZE  MASTER_ADDR=127.0.0.1
//   MASTER_PORT=<a free loopback port, chosen by binding port 0>
// — and the parent REQUIREs that every child succeeded, printing what each
// failed child reported. A child fails when fn throws (its what() is reported),
// when a doctest CHECK/REQUIRE inside fn fails (file:line, expression and
// values are reported), when it exits non-zero, or when it dies by a signal.
// Children still alive at `timeout` are killed by PID (SIGKILL) and reported
// as timed out; children also die with the parent (PR_SET_PDEATHSIG), so no
// test leaves ranks behind.
//
// launch_ranks(...) does the same but returns each rank's RankResult instead
// of asserting — for tests where a rank is *expected* to fail (a killed rank,
// a timeout whose message is checked).
//
// Rules for callers:
//  - Call it at the start of the test case, before the parent creates threads
//    or uses the process-group machinery: fork copies only the calling thread.
//  - Children run with ls::set_num_threads(1): the ranks share the machine's
//    cores, and libgomp's thread pool does not survive fork.
//  - fn should bound every wait with a timeout shorter than run_ranks' one, so
//    that a failure is reported by the rank that saw it, not as a kill.
//  - Every call picks a fresh port, so CTest may run such tests in parallel.
//
// Read before: distributed/rendezvous.h (what the children usually call first).
// Used by: tests/distributed/test_*.cpp.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "core/error.h"
#include "core/parallel.h"

namespace lockstep::testing {

// What one child rank did.
struct RankResult {
  int rank = -1;
  int exit_code = -1;      // exit status when it exited normally, else -1
  int signal = 0;          // the signal that ended it, else 0
  bool timed_out = false;  // killed by the parent at the timeout
  std::string message;     // what the child reported: exception text, failed checks

  bool ok() const { return exit_code == 0 && signal == 0 && !timed_out && message.empty(); }
  std::string describe() const {
    std::ostringstream os;
    os << "rank " << rank << ": ";
    if (timed_out) {
      os << "timed out (killed by run_ranks)";
    } else if (signal != 0) {
      os << "killed by signal " << signal << " (" << strsignal(signal) << ")";
    } else {
      os << "exit status " << exit_code;
    }
    if (!message.empty()) os << "\n" << message;
    return os.str();
  }
};

namespace detail {

// Set in a forked child: the listener below records failed assertions to
// child_report() only there (in the parent doctest reports them as usual).
inline bool& in_child() {
  static bool flag = false;
  return flag;
}
inline std::string& child_report() {
  static std::string text;
  return text;
}

// A doctest listener that turns failed CHECKs in a child into report lines.
struct ChildAssertListener : public doctest::IReporter {
  explicit ChildAssertListener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}

  void log_assert(const doctest::AssertData& a) override {
    if (!in_child() || !a.m_failed) return;
    std::ostringstream os;
    os << a.m_file << ":" << a.m_line << ": " << doctest::assertString(a.m_at) << "( " << a.m_expr
       << " ) failed";
    if (a.m_threw) {
      os << ", threw: " << a.m_exception.c_str();
    } else if (a.m_decomp.size() > 0) {
      os << ", values: " << a.m_decomp.c_str();
    }
    append(os.str());
  }
  void log_message(const doctest::MessageData& m) override {
    if (!in_child()) return;
    if (!(m.m_severity & (doctest::assertType::is_check | doctest::assertType::is_require))) return;
    std::ostringstream os;
    os << m.m_file << ":" << m.m_line << ": " << m.m_string.c_str();
    append(os.str());
  }

 private:
  static void append(const std::string& line) {
    std::string& r = child_report();
    std::ostringstream ctx;
    int n = doctest::IReporter::get_num_active_contexts();
    const doctest::IContextScope* const* scopes = doctest::IReporter::get_active_contexts();
    for (int i = 0; i < n; ++i) {
      ctx << "  with ";
      scopes[i]->stringify(&ctx);
      ctx << "\n";
    }
    r += line + "\n" + ctx.str();
  }
};
// Registered from every file that includes this header; doctest keys listeners
// by (priority, name), so the repeats collapse into one.
DOCTEST_REGISTER_LISTENER("lockstep_multiprocess", 1, ChildAssertListener);

inline void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// In the child: run fn, report, and _exit (never return into doctest).
[[noreturn]] inline void child_main(int rank, int world_size, int port, int report_fd,
                                    const std::function<void(int)>& fn) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(world_size).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(world_size).c_str(), 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  in_child() = true;
  int code = 0;
  try {
    lockstep::set_num_threads(1);
    fn(rank);
  } catch (const std::exception& e) {
    child_report() += std::string("exception: ") + e.what() + "\n";
    code = 1;
  } catch (...) {
    // doctest's REQUIRE throws its own (non-std) exception after logging the failure.
    if (child_report().empty()) child_report() = "unknown exception\n";
    code = 1;
  }
  if (!child_report().empty() && code == 0) code = 1;  // a failed CHECK
  write_all(report_fd, child_report());
  ::close(report_fd);
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  ::_exit(code);
}

}  // namespace detail

// A TCP port on 127.0.0.1 that is free right now (bind port 0, read it back).
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  LS_CHECK(fd >= 0, "free_port: socket() failed: ", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  LS_CHECK(ok, "free_port: could not bind a loopback port: ", std::strerror(errno));
  return ntohs(addr.sin_port);
}

// Forks world_size ranks running fn(rank); waits for all (killing any still
// alive at `timeout`) and returns what each did, in rank order.
inline std::vector<RankResult> launch_ranks(int world_size, const std::function<void(int)>& fn,
                                            std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  LS_CHECK(world_size >= 1, "launch_ranks: world_size must be >= 1, got ", world_size);
  const int port = free_port();
  std::cout.flush();
  std::fflush(nullptr);  // do not let the children inherit (and re-print) buffered output

  std::vector<pid_t> pids(world_size, -1);
  std::vector<int> fds(world_size, -1);
  std::vector<RankResult> results(world_size);
  for (int r = 0; r < world_size; ++r) {
    int p[2];
    LS_CHECK(::pipe(p) == 0, "launch_ranks: pipe() failed: ", std::strerror(errno));
    pid_t pid = ::fork();
    if (pid < 0) {
      for (int k = 0; k < r; ++k) ::kill(pids[k], SIGKILL);
      for (int k = 0; k < r; ++k) ::waitpid(pids[k], nullptr, 0);
      LS_CHECK(false, "launch_ranks: fork() failed for rank ", r, ": ", std::strerror(errno));
    }
    if (pid == 0) {
      ::close(p[0]);
      for (int k = 0; k < r; ++k) ::close(fds[k]);
      detail::child_main(r, world_size, port, p[1], fn);
    }
    ::close(p[1]);
    ::fcntl(p[0], F_SETFL, ::fcntl(p[0], F_GETFL) | O_NONBLOCK);
    pids[r] = pid;
    fds[r] = p[0];
    results[r].rank = r;
  }

  // Drain the report pipes (a child blocks if its pipe fills) and reap exits.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int running = world_size;
  auto drain = [&](int r) {
    char buf[4096];
    for (;;) {
      ssize_t n = ::read(fds[r], buf, sizeof(buf));
      if (n > 0) {
        results[r].message.append(buf, static_cast<size_t>(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        return;
      }
    }
  };
  while (running > 0) {
    std::vector<pollfd> pfds;
    for (int r = 0; r < world_size; ++r) {
      if (fds[r] >= 0) pfds.push_back({fds[r], POLLIN, 0});
    }
    if (!pfds.empty()) ::poll(pfds.data(), pfds.size(), 10);
    else std::this_thread::sleep_for(std::chrono::milliseconds(10));
    for (int r = 0; r < world_size; ++r) {
      if (fds[r] >= 0) drain(r);
      if (pids[r] < 0) continue;
      int status = 0;
      pid_t got = ::waitpid(pids[r], &status, WNOHANG);
      if (got != pids[r]) continue;
      if (WIFEXITED(status)) results[r].exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) results[r].signal = WTERMSIG(status);
      pids[r] = -1;
      --running;
    }
    if (running > 0 && std::chrono::steady_clock::now() >= deadline) {
      for (int r = 0; r < world_size; ++r) {
        if (pids[r] < 0) continue;
        ::kill(pids[r], SIGKILL);
        ::waitpid(pids[r], nullptr, 0);
        results[r].timed_out = true;
        pids[r] = -1;
        --running;
      }
    }
  }
  for (int r = 0; r < world_size; ++r) {
    drain(r);
    ::close(fds[r]);
    while (!results[r].message.empty() && results[r].message.back() == '\n') results[r].message.pop_back();
  }
  return results;
}

// Forks world_size ranks running fn(rank) and REQUIREs that all succeed.
inline void run_ranks(int world_size, const std::function<void(int)>& fn,
                      std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  std::vector<RankResult> results = launch_ranks(world_size, fn, timeout);
  std::string failures;
  for (const RankResult& r : results) {
    if (!r.ok()) failures += r.describe() + "\n";
  }
  REQUIRE_MESSAGE(failures.empty(), "run_ranks(" << world_size << "): failed ranks:\n" << failures);
}

}  // namespace lockstep::testing
