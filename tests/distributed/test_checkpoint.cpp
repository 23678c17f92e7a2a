// tests/distributed/test_checkpoint.cpp — save_on_rank0: every rank returns once
// rank 0's file is complete and readable; when rank 0 cannot write, every rank
// throws (rank 0 its own error, the others one naming rank 0 and the path) and
// nobody hangs.
// Read before: distributed/checkpoint.h.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "core/factory.h"
#include "distributed/checkpoint.h"
#include "distributed/init.h"
#include "nn/serialize.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;

TEST_CASE("checkpoint: save_on_rank0 returns on every rank with the file complete") {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("ls_ckpt_" + std::to_string(::getpid()) + ".safetensors")).string();
  ls::testing::run_ranks(2, [path](int rank) {
    auto pg = dist::init_process_group("gloo");
    std::map<std::string, ls::Tensor> tensors{{"w", ls::arange(6).to(ls::kFloat32).reshape({2, 3})}};
    dist::save_on_rank0(tensors, path, *pg, {{"epoch", "3"}});
    // Every rank can read it at once: the status broadcast came after the rename.
    ls::nn::Metadata meta;
    auto loaded = ls::nn::load_tensors(path, &meta);
    CHECK(ls::equal(loaded.at("w"), tensors.at("w")));
    CHECK(meta.at("epoch") == "3");
    pg->barrier()->wait();
    if (rank == 0) std::filesystem::remove(path);
  }, std::chrono::seconds(60));
}

TEST_CASE("checkpoint: when rank 0 cannot write, every rank throws instead of waiting") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    std::map<std::string, ls::Tensor> tensors{{"w", ls::ones({2})}};
    std::string message;
    try {
      dist::save_on_rank0(tensors, "/nonexistent-dir/ckpt.safetensors", *pg);
    } catch (const std::exception& e) {
      message = e.what();
    }
    INFO(message);
    REQUIRE_FALSE(message.empty());
    CHECK(message.find("/nonexistent-dir/ckpt.safetensors") != std::string::npos);
    if (rank != 0) CHECK(message.find("rank 0 could not write the checkpoint") != std::string::npos);
  }, std::chrono::seconds(60));
}
