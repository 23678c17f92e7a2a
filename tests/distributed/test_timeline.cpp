// tests/distributed/test_timeline.cpp — the timeline (core/timeline.h) of a
// 2-rank DDP run: each rank writes valid Chrome-trace JSON named by its rank,
// with the forward, backward, optimizer and per-node spans, and for every
// bucket of every iteration one "ready" per parameter, one "launch" no earlier
// than the bucket's last ready, and an AllReduce span that begins at the launch
// and ends no earlier; nothing is recorded without a Recorder. Then
// tools/timeline.py merges the ranks' files and draws the PNG summary (a case
// of its own, skipped when /usr/bin/python3 or its matplotlib is missing).
// Read before: core/timeline.h, distributed/ddp/reducer_timeline.h.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/grad_mode.h"
#include "core/timeline.h"
#include "distributed/distributed.h"
#include "optim/optim.h"
#include "tests/distributed/ddp_test_models.h"
#include "tests/distributed/trace_json.h"
#include "tests/support/multiprocess.h"
#include "tests/support/skip.h"
#include "tests/support/temp_files.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using ls::testing::Json;

namespace {

constexpr int kIterations = 3;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open ", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Three DDP iterations of TinyCNN with several small buckets, recorded.
std::string record_ddp_run(int rank, const std::string& path) {
  auto [x, y] = ls::testing::image_data(2 * kIterations * 4, 5);
  auto pg = dist::init_process_group("gloo");
  ls::manual_seed(0);
  auto model = std::make_shared<ls::testing::TinyCNN>();
  ls::timeline::Recorder recorder(path);
  dist::DistributedDataParallel ddp(model, pg,
                                    dist::DDPOptions().bucket_cap_mb(0.001).first_bucket_mb(0.001));
  ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
  for (int it = 0; it < kIterations; ++it) {
    const int64_t first = (it * 2 + rank) * 4;
    ls::cross_entropy(ddp.forward(x.narrow(0, first, 4)), y.narrow(0, first, 4)).backward();
    opt.step();
    opt.zero_grad();
  }
  return recorder.stop();
}

// The checks of one rank's trace; see the file comment.
void check_trace(const Json& trace, int rank, size_t num_params) {
  REQUIRE(trace.at("traceEvents").kind == Json::Kind::Array);
  std::map<std::string, int> spans;                                 // X events by name
  std::map<std::pair<int, int>, double> last_ready;                 // (iteration, bucket) -> ts
  std::map<int, std::set<std::string>> ready_params;                // iteration -> params
  std::map<int, int> ready_count;                                   // iteration -> events
  std::map<std::pair<int, int>, double> launch;                     // (iteration, bucket) -> ts
  std::map<double, std::pair<std::pair<int, int>, double>> begins;  // id -> ((it, bucket), ts)
  std::map<double, double> ends;                                    // id -> ts
  for (const Json& e : trace.at("traceEvents").array) {
    const std::string ph = e.at("ph").string;
    if (ph == "M") continue;
    CHECK(e.at("pid").number == rank);
    const std::string name = e.at("name").string;
    const double ts = e.at("ts").number;
    if (ph == "X") {
      CHECK(e.at("dur").number >= 0);
      ++spans[name];
    } else if (ph == "i" && name == "ready") {
      const auto& a = e.at("args");
      const int it = static_cast<int>(a.at("iteration").number),
                b = static_cast<int>(a.at("bucket").number);
      auto& last = last_ready[{it, b}];
      last = std::max(last, ts);
      ready_params[it].insert(a.at("param").string);
      ++ready_count[it];
    } else if (ph == "i" && name == "launch") {
      const auto& a = e.at("args");
      const auto key = std::make_pair(static_cast<int>(a.at("iteration").number),
                                      static_cast<int>(a.at("bucket").number));
      CHECK(launch.count(key) == 0);
      launch[key] = ts;
    } else if (ph == "b") {
      const auto& a = e.at("args");
      CHECK(e.at("cat").string == "allreduce");
      begins[e.at("id").number] = {
          {static_cast<int>(a.at("iteration").number), static_cast<int>(a.at("bucket").number)},
          ts};
    } else if (ph == "e") {
      ends[e.at("id").number] = ts;
    }
  }
  for (const char* name : {"DDP.forward", "autograd.backward", "optimizer.step", "conv2d",
                           "Conv2dBackward", "AccumulateGrad"}) {
    INFO("span ", name);
    CHECK(spans[name] >= (std::string(name) == "conv2d" ? 2 * kIterations : kIterations));
  }
  CHECK(spans["autograd.backward"] == kIterations);
  // Every parameter ready exactly once per iteration.
  REQUIRE(ready_count.size() == static_cast<size_t>(kIterations));
  for (auto& [it, n] : ready_count) {
    CHECK(n == static_cast<int>(num_params));
    CHECK(ready_params[it].size() == num_params);
  }
  // Several buckets, each launched once per iteration after its last ready.
  CHECK(launch.size() == last_ready.size());
  CHECK(last_ready.size() >= static_cast<size_t>(2 * kIterations));
  for (const auto& [key, ready_ts] : last_ready) {
    INFO("iteration ", key.first, " bucket ", key.second);
    REQUIRE(launch.count(key) == 1);
    CHECK(launch[key] >= ready_ts);
  }
  // Every AllReduce span begins at its launch and ends, after it began.
  CHECK(begins.size() == launch.size());
  for (const auto& [id, begin] : begins) {
    INFO("async id ", id);
    REQUIRE(launch.count(begin.first) == 1);
    CHECK(begin.second >= launch[begin.first]);
    REQUIRE(ends.count(id) == 1);
    CHECK(ends[id] >= begin.second);
  }
}

// tools/timeline.py: in the source folder (LOCKSTEP_SOURCE_DIR, tests/CMakeLists.txt),
// else in the working directory or one of its parents.
std::string timeline_script() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates{fs::path(LOCKSTEP_SOURCE_DIR)};
  for (fs::path dir = fs::current_path(); !dir.empty(); dir = dir.parent_path()) {
    candidates.push_back(dir);
    if (dir == dir.parent_path()) break;
  }
  for (const auto& root : candidates) {
    if (fs::exists(root / "tools" / "timeline.py"))
      return (root / "tools" / "timeline.py").string();
  }
  return {};
}

bool python_with_matplotlib() {
  return std::system("/usr/bin/python3 -c 'import matplotlib' > /dev/null 2>&1") == 0;
}

}  // namespace

TEST_CASE("timeline: rank_path inserts the rank before .json") {
  CHECK(ls::timeline::rank_path("out/trace.json", 1) == "out/trace.rank1.json");
  CHECK(ls::timeline::rank_path("trace", 0) == "trace.rank0.json");
}

TEST_CASE("timeline: nothing is recorded without a Recorder, and a Recorder writes what it saw") {
  ls::testing::TempDir dir("timeline_unit");
  ls::testing::run_ranks(
      1,
      [path = dir.file("t.json")](int) {
        CHECK_FALSE(ls::timeline::is_enabled());
        ls::timeline::instant("before", "test");  // dropped: not recording
        std::string written;
        {
          ls::timeline::Recorder rec(path);
          CHECK(ls::timeline::is_enabled());
          CHECK_THROWS_AS(ls::timeline::Recorder(path + "2"), ls::Error);  // one at a time
          ls::timeline::instant("inside", "test", "\"k\":1");
          ls::timeline::async_begin("span", "test", 42);
          ls::timeline::async_end_when(42, [] { return true; });
          { ls::profiler::Scope s("my_scope"); }
          written = rec.stop();
        }
        CHECK_FALSE(ls::timeline::is_enabled());
        ls::timeline::instant("after", "test");  // dropped again
        CHECK(written == ls::timeline::rank_path(path, 0));
        const Json trace = ls::testing::parse_json_text(read_file(written));
        std::multiset<std::string> names;
        for (const Json& e : trace.at("traceEvents").array)
          names.insert(e.at("ph").string + ":" + e.at("name").string);
        CHECK(names.count("i:inside") == 1);
        CHECK(names.count("b:span") == 1);
        CHECK(names.count("e:span") == 1);
        CHECK(names.count("X:my_scope") == 1);
        CHECK(names.count("i:before") == 0);
        CHECK(names.count("i:after") == 0);
      },
      std::chrono::seconds(60));
}

TEST_CASE("timeline: a 2-rank DDP run writes ordered ready, launch and done events per bucket") {
  ls::testing::TempDir dir("timeline_ddp");
  const std::string path = dir.file("trace.json");
  ls::testing::run_ranks(
      2,
      [path](int rank) {
        const std::string written = record_ddp_run(rank, path);
        CHECK(written == ls::timeline::rank_path(path, rank));
        const Json trace = ls::testing::parse_json_text(read_file(written));
        check_trace(trace, rank, ls::testing::TinyCNN().parameters().size());
      },
      std::chrono::seconds(120));
}

// Needs /usr/bin/python3 with matplotlib: its own CTest entry, skipped (exit 77)
// without them (Note [Skipping a test case], tests/support/skip.h).
TEST_CASE("timeline: tools/timeline.py merges the traces of a 2-rank DDP run, draws the PNG and prints the "
          "overlap per rank" * doctest::skip()) {
  if (!python_with_matplotlib()) ls::testing::skip_test("tools/timeline.py: /usr/bin/python3 with matplotlib not found");
  ls::testing::TempDir dir("timeline_py");
  const std::string path = dir.file("trace.json");
  ls::testing::run_ranks(
      2, [path](int rank) { CHECK(record_ddp_run(rank, path) == ls::timeline::rank_path(path, rank)); },
      std::chrono::seconds(120));

  // tools/timeline.py: merges both ranks (pid = rank), draws the PNG, prints the overlap.
  const std::string script = timeline_script();
  REQUIRE_MESSAGE(!script.empty(), "tools/timeline.py not found from ", LOCKSTEP_SOURCE_DIR,
                  " or the working directory");
  const std::string merged = dir.file("merged.json"), png = dir.file("timeline.png"),
                    out = dir.file("out.txt");
  const std::string cmd = "/usr/bin/python3 " + script + " " + ls::timeline::rank_path(path, 0) +
                          " " + ls::timeline::rank_path(path, 1) + " -o " + merged + " --png " +
                          png + " > " + out + " 2>&1";
  const int rc = std::system(cmd.c_str());
  INFO(cmd, "\n", read_file(out));
  REQUIRE(rc == 0);
  const Json all = ls::testing::parse_json_text(read_file(merged));
  std::set<double> pids;
  for (const Json& e : all.at("traceEvents").array) pids.insert(e.at("pid").number);
  CHECK(pids == std::set<double>{0, 1});
  const std::string image = read_file(png);
  REQUIRE(image.size() > 8);
  CHECK(image.substr(1, 3) == "PNG");
  // "overlap: rank 0 0.42 ..." — one fraction in [0, 1] per rank.
  const std::string text = read_file(out);
  for (int r = 0; r < 2; ++r) {
    const std::string tag = "rank " + std::to_string(r) + " overlapped fraction: ";
    const size_t at = text.find(tag);
    REQUIRE(at != std::string::npos);
    const double f = std::strtod(text.c_str() + at + tag.size(), nullptr);
    CHECK(f >= 0.0);
    CHECK(f <= 1.0);
  }
}
