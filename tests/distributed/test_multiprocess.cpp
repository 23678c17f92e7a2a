// tests/distributed/test_multiprocess.cpp — the multi-process test helper itself
// (tests/support/multiprocess.h): children get the torchrun variables, and a
// throwing, failing-CHECK, crashing or hanging rank is reported as such.
// (The deliberately failing CHECK of rank 2 below is also printed by doctest in
// that child: expected output, the test case itself passes.)
// Read before: tests/support/multiprocess.h.
#include <doctest/doctest.h>

#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>

#include "tests/support/multiprocess.h"

namespace ls = lockstep;

TEST_CASE("multiprocess: children see RANK, WORLD_SIZE and a master address") {
  ls::testing::run_ranks(3, [](int rank) {
    REQUIRE(std::getenv("RANK") != nullptr);
    CHECK(std::stoi(std::getenv("RANK")) == rank);
    CHECK(std::stoi(std::getenv("WORLD_SIZE")) == 3);
    CHECK(std::stoi(std::getenv("LOCAL_RANK")) == rank);
    CHECK(std::string(std::getenv("MASTER_ADDR")) == "127.0.0.1");
    int port = std::stoi(std::getenv("MASTER_PORT"));
    CHECK(port > 0);
    CHECK(port < 65536);
  });
}

TEST_CASE("multiprocess: a throwing, failing or crashing rank is reported with its message") {
  auto results = ls::testing::launch_ranks(4, [](int rank) {
    if (rank == 1) throw ls::Error("rank one gave up");
    if (rank == 2) CHECK(rank == 7);
    if (rank == 3) std::raise(SIGKILL);
  });
  REQUIRE(results.size() == 4);
  CHECK(results[0].ok());
  CHECK_FALSE(results[1].ok());
  CHECK(results[1].exit_code == 1);
  CHECK(results[1].message.find("rank one gave up") != std::string::npos);
  CHECK_FALSE(results[2].ok());
  CHECK(results[2].message.find("rank == 7") != std::string::npos);
  CHECK(results[2].message.find("2 == 7") != std::string::npos);
  CHECK(results[3].signal == SIGKILL);
  CHECK(results[3].describe().find("signal") != std::string::npos);
}

TEST_CASE("multiprocess: a rank outliving the timeout is killed and reported") {
  auto results = ls::testing::launch_ranks(
      2,
      [](int rank) {
        if (rank == 1) std::this_thread::sleep_for(std::chrono::seconds(60));
      },
      std::chrono::milliseconds(500));
  CHECK(results[0].ok());
  CHECK(results[1].timed_out);
  CHECK(results[1].describe().find("timed out") != std::string::npos);
}

TEST_CASE("multiprocess: free_port returns distinct usable ports") {
  int a = ls::testing::free_port();
  int b = ls::testing::free_port();
  CHECK(a > 0);
  CHECK(b > 0);
  CHECK(a != b);
}
