// tests/distributed/test_launcher.cpp — build/bin/lockstep-run with small shell
// commands: the variables each rank sees, the "[rank R] " output prefix, the
// failure of one rank stopping the others and naming it, SIGTERM forwarded to
// every rank, argument errors, the threads of oversubscribed ranks.
// Every run is wrapped in coreutils `timeout`, so a broken launcher fails the
// test instead of hanging it.
// Read before: tools/lockstep_run.cpp.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "distributed/oversubscription.h"
#include "tools/launch_threads.h"

namespace {

// lockstep-run sits next to the test executable (both in <build>/bin).
std::string launcher() {
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe");
  std::filesystem::path exe = self.parent_path() / "lockstep-run";
  REQUIRE_MESSAGE(std::filesystem::exists(exe), "build the lockstep-run target first: ", exe.string(),
                  " is missing");
  return exe.string();
}

struct Run {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a shell command line (bounded by `timeout`), capturing its output.
Run run_shell(const std::string& cmd) {
  Run r;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

Run run(const std::string& args) { return run_shell("timeout -s KILL 60 " + launcher() + " " + args + " 2>&1"); }

// `s` inside single quotes for sh.
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool has(const Run& r, const std::string& s) { return r.output.find(s) != std::string::npos; }

}  // namespace

TEST_CASE("launcher: sets the rank variables and prefixes every output line") {
  Run r = run("--nproc-per-node 3 --master-port 29612 -- sh -c "
              "'echo r$RANK w$WORLD_SIZE l$LOCAL_RANK n$LOCAL_WORLD_SIZE $MASTER_ADDR:$MASTER_PORT; "
              "echo second line; echo to-stderr >&2'");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  for (int k = 0; k < 3; ++k) {
    std::string p = "[rank " + std::to_string(k) + "] ";
    CHECK(has(r, p + "r" + std::to_string(k) + " w3 l" + std::to_string(k) + " n3 127.0.0.1:29612\n"));
    CHECK(has(r, p + "second line\n"));
    CHECK(has(r, p + "to-stderr\n"));
  }
}

TEST_CASE("launcher: --nnodes and --node-rank offset the global ranks") {
  Run r = run("--nproc-per-node=2 --nnodes 2 --node-rank 1 --master-addr 10.0.0.7 -- sh -c "
              "'echo r$RANK w$WORLD_SIZE l$LOCAL_RANK $MASTER_ADDR'");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(has(r, "[rank 2] r2 w4 l0 10.0.0.7"));
  CHECK(has(r, "[rank 3] r3 w4 l1 10.0.0.7"));
}

TEST_CASE("launcher: a failing rank stops the others and is named with its exit status") {
  // Rank 1 exits 3 (after a pause, so the others have set their traps); ranks 0
  // and 2 sleep and report the SIGTERM they get.
  Run r = run("--nproc-per-node 3 --grace-period 20 -- sh -c "
              "'if [ $RANK = 1 ]; then sleep 1; exit 3; fi; trap \"echo terminated; exit 0\" TERM; "
              "sleep 30 & wait'");
  INFO(r.output);
  CHECK(r.exit_code == 3);
  CHECK(has(r, "lockstep-run: rank 1 failed first (exit status 3)"));
  CHECK(has(r, "[rank 0] terminated"));
  CHECK(has(r, "[rank 2] terminated"));
}

TEST_CASE("launcher: a rank killed by a signal is reported by the signal's name") {
  Run r = run("--nproc-per-node 2 -- sh -c 'if [ $RANK = 0 ]; then kill -KILL $$; fi; sleep 30'");
  INFO(r.output);
  CHECK(r.exit_code == 128 + 9);
  CHECK(has(r, "lockstep-run: rank 0 failed first (signal SIGKILL)"));
}

TEST_CASE("launcher: argument errors are explained and --help prints usage") {
  Run none = run("-- true");
  CHECK(none.exit_code == 2);
  CHECK(has(none, "--nproc-per-node is required"));
  Run bad = run("--nproc-per-node two -- true");
  CHECK(bad.exit_code == 2);
  CHECK(has(bad, "--nproc-per-node: 'two' is not a whole number"));
  Run unknown = run("--nproc-per-node 2 --frobnicate -- true");
  CHECK(unknown.exit_code == 2);
  CHECK(has(unknown, "unknown option '--frobnicate'"));
  Run node = run("--nproc-per-node 2 --nnodes 2 --node-rank 2 -- true");
  CHECK(node.exit_code == 2);
  CHECK(has(node, "--node-rank 2 but --nnodes 2"));
  Run noprog = run("--nproc-per-node 2");
  CHECK(noprog.exit_code == 2);
  CHECK(has(noprog, "no program given"));
  Run missing = run("--nproc-per-node 1 -- /nonexistent/program");
  CHECK(missing.exit_code == 127);
  CHECK(has(missing, "cannot run '/nonexistent/program'"));
  Run help = run("--help");
  CHECK(help.exit_code == 0);
  CHECK(has(help, "usage: lockstep-run --nproc-per-node N"));
}

TEST_CASE("launcher: SIGTERM sent to the launcher is forwarded to every rank") {
  // The launcher runs in the background of a shell; once both ranks have set
  // their TERM trap (they print "ready"), the shell sends SIGTERM to the launcher.
  const std::string script =
      "out=$(mktemp); " + launcher() +
      " --nproc-per-node 2 -- sh -c 'trap \"echo got-term; exit 0\" TERM; echo ready; sleep 30 & wait' > $out 2>&1 & "
      "lp=$!; i=0; while [ $(grep -c ready $out) -lt 2 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; "
      "kill -TERM $lp; wait $lp; echo \"launcher exit $?\"; cat $out; rm -f $out";
  Run r = run_shell("timeout -s KILL 60 sh -c " + shell_quote(script) + " 2>&1");
  INFO(r.output);
  CHECK(has(r, "launcher exit 143"));  // 128 + SIGTERM
  CHECK(has(r, "[rank 0] got-term"));
  CHECK(has(r, "[rank 1] got-term"));
  CHECK(has(r, "lockstep-run: received SIGTERM, forwarded it to every rank"));
}

// Note [Oversubscribed ranks] (tools/launch_threads.h), with the CPUs this test may run on.
TEST_CASE("launcher: OMP_NUM_THREADS divides the CPUs among the ranks, PASSIVE when they are oversubscribed or get one thread each") {
  const int cpus = lockstep::launcher::available_cpus();
  const std::string show = "-- sh -c 'echo t=$OMP_NUM_THREADS p=$OMP_WAIT_POLICY.'";
  // Unset: CPUs / ranks (at least 1), said on stderr; PASSIVE only where that share is one
  // thread (a program raising its own count would oversubscribe), said on the same line.
  Run unset = run_shell("env -u OMP_NUM_THREADS -u OMP_WAIT_POLICY timeout -s KILL 60 " + launcher() +
                        " --nproc-per-node 2 " + show + " 2>&1");
  INFO(unset.output);
  CHECK(unset.exit_code == 0);
  const int each = cpus / 2 > 1 ? cpus / 2 : 1;
  CHECK(has(unset, "[rank 1] t=" + std::to_string(each) + " p=" + (each == 1 ? "PASSIVE." : ".")));
  CHECK(has(unset, "lockstep-run: OMP_NUM_THREADS is unset"));
  CHECK(has(unset, "OMP_WAIT_POLICY=PASSIVE in case the program asks for more") == (each == 1));
  // One thread a rank on any machine (as many ranks as CPUs): PASSIVE, unless the user set a policy.
  const std::string all = std::to_string(cpus);
  Run one = run_shell("env -u OMP_NUM_THREADS -u OMP_WAIT_POLICY timeout -s KILL 60 " + launcher() +
                      " --nproc-per-node " + all + " " + show + " 2>&1");
  INFO(one.output);
  CHECK(has(one, "[rank 0] t=1 p=" + std::string(cpus > 1 ? "PASSIVE." : ".")));
  Run one_kept = run_shell("env -u OMP_NUM_THREADS OMP_WAIT_POLICY=ACTIVE timeout -s KILL 60 " + launcher() +
                           " --nproc-per-node " + all + " " + show + " 2>&1");
  INFO(one_kept.output);
  CHECK(has(one_kept, "[rank 0] t=1 p=ACTIVE."));
  CHECK_FALSE(has(one_kept, "OMP_WAIT_POLICY=PASSIVE"));
  // Set so that the ranks' threads outnumber the CPUs: PASSIVE, said on stderr.
  const std::string many = std::to_string(cpus);
  Run over = run_shell("env -u OMP_WAIT_POLICY OMP_NUM_THREADS=" + many + " timeout -s KILL 60 " + launcher() +
                       " --nproc-per-node 2 " + show + " 2>&1");
  INFO(over.output);
  CHECK(has(over, "[rank 0] t=" + many + " p=PASSIVE."));
  CHECK(has(over, "setting OMP_WAIT_POLICY=PASSIVE"));
  // What the user set is kept.
  Run kept = run_shell("OMP_WAIT_POLICY=ACTIVE OMP_NUM_THREADS=" + many + " timeout -s KILL 60 " + launcher() +
                       " --nproc-per-node 2 " + show + " 2>&1");
  INFO(kept.output);
  CHECK(has(kept, "[rank 1] t=" + many + " p=ACTIVE."));
  CHECK_FALSE(has(kept, "lockstep-run: OMP"));
}

TEST_CASE("oversubscription: the warning init_process_group gives names the counts and what to set") {
  namespace d = lockstep::distributed::detail;
  const d::RankCpus shared{2, false};  // two CPUs every rank may run on
  const std::string w = d::oversubscription_warning({2, 0}, 2, shared, nullptr);
  CHECK(w.find("2 ranks on this machine x 2 OpenMP threads each > 2 CPUs") != std::string::npos);
  CHECK(w.find("OMP_WAIT_POLICY=PASSIVE") != std::string::npos);
  CHECK(w.find("OMP_NUM_THREADS=1") != std::string::npos);
  CHECK(d::oversubscription_warning({2, 0}, 2, shared, "passive").empty());  // case does not matter
  CHECK_FALSE(d::oversubscription_warning({2, 0}, 2, shared, "ACTIVE").empty());
  CHECK(d::oversubscription_warning({2, 0}, 1, shared, nullptr).empty());  // fits
  CHECK(d::oversubscription_warning({1, 0}, 2, shared, nullptr).empty());
  CHECK_FALSE(d::oversubscription_warning({2, 0}, 1, {1, false}, nullptr).empty());  // 2 ranks on 1 CPU
  // Note [Ranks bound to CPUs of their own]: `mpirun -np 2` binds each rank to a core, so
  // one thread on the one CPU of its mask is no oversubscription; two threads there are.
  CHECK(d::oversubscription_warning({2, 0}, 1, {1, true}, nullptr).empty());
  CHECK(d::oversubscription_warning({4, 0}, 2, {2, true}, nullptr).empty());
  const std::string b = d::oversubscription_warning({2, 0}, 2, {1, true}, nullptr);
  CHECK(b.find("bound to 1 CPU(s) of its own (by its launcher) and runs 2 OpenMP threads") != std::string::npos);
  CHECK(b.find("OMP_NUM_THREADS=1") != std::string::npos);
  CHECK(b.find("--map-by slot:PE=2") != std::string::npos);
  CHECK(d::oversubscription_warning({2, 0}, 2, {1, true}, "PASSIVE").empty());
  // The cpuset's CPU list (cgroup cpuset.cpus.effective).
  CHECK(d::cpu_list_count("0-1\n") == 2);
  CHECK(d::cpu_list_count("0-3,8,10-11") == 7);
  CHECK(d::cpu_list_count("5") == 1);
  CHECK(d::cpu_list_count("") == 0);
  CHECK(d::cpu_list_count("3-1") == 0);
  CHECK(d::cpu_list_count("x") == 0);
  const d::RankCpus here = d::rank_cpus();  // this process: at least one CPU, bound or not
  CHECK(here.cpus >= 1);
  // The launcher variables, in order of precedence; none: no local ranks known.
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "3", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2", 1);
  unsetenv("LOCAL_WORLD_SIZE");
  auto local = d::local_ranks_from_environment();
  REQUIRE(local.has_value());
  CHECK(local->size == 3);
  CHECK(local->rank == 2);
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
}
