// tests/core/test_pending_write.cpp — Note [Pending writes]: a write attached to
// a storage lands before anything reads or writes the storage (an op, a copy,
// item()), once, from whichever thread touches it first; its own finish and a
// PendingWriteBypass thread go through without waiting; a failed write fails
// every touch; views share their storage's write.
// Read before: core/pending_write.h, core/storage.h.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/factory.h"
#include "core/pending_write.h"
#include "core/tensor.h"

namespace ls = lockstep;

namespace {
// Writes `value` into t (behind the storage's back, as a collective would) when it is finished.
std::shared_ptr<ls::PendingWrite> write_later(const ls::Tensor& t, float value, std::atomic<int>& runs) {
  return std::make_shared<ls::PendingWrite>([t, value, &runs] {
    ++runs;
    float* p = t.data_ptr<float>();  // re-entrant: the write's own finish touches the storage
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = value;
  });
}
}  // namespace

TEST_CASE("pending write: the first touch runs it, once, ops, copies and item() see the written values") {
  ls::Tensor t = ls::zeros({4});
  std::atomic<int> runs{0};
  t.impl()->storage->attach_pending_write(write_later(t, 3.0f, runs));
  CHECK(t.impl()->storage->has_pending_write());
  CHECK(runs == 0);  // attaching does not run it
  ls::Tensor doubled = t * 2.0;
  CHECK(runs == 1);
  CHECK_FALSE(t.impl()->storage->has_pending_write());
  CHECK(doubled.to_vector<float>() == std::vector<float>{6, 6, 6, 6});
  CHECK(t.sum().item<float>() == 12.0f);
  CHECK(runs == 1);

  // A view shares the storage, and so the write.
  ls::Tensor u = ls::zeros({2, 3});
  u.impl()->storage->attach_pending_write(write_later(u, 5.0f, runs));
  ls::Tensor row = u.narrow(0, 1, 1);
  CHECK(row.clone().to_vector<float>() == std::vector<float>{5, 5, 5});
  CHECK(runs == 2);
  // Writing waits too: the write lands first, then the copy overwrites it.
  ls::Tensor w = ls::zeros({2});
  w.impl()->storage->attach_pending_write(write_later(w, 7.0f, runs));
  w.narrow(0, 0, 1).copy_(ls::ones({1}));
  CHECK(runs == 3);
  CHECK(w.to_vector<float>() == std::vector<float>{1, 7});
}

TEST_CASE("pending write: threads touching it at once wait for the one that runs it") {
  ls::Tensor t = ls::zeros({1024});
  std::atomic<int> runs{0};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  auto write = std::make_shared<ls::PendingWrite>([t, &runs, released] {
    ++runs;
    released.wait();  // the collective is still on the wire
    ls::Tensor(t).fill_(2.0);
  });
  t.impl()->storage->attach_pending_write(write);
  std::vector<std::future<double>> sums;
  for (int i = 0; i < 4; ++i) sums.push_back(std::async(std::launch::async, [t] { return t.sum().item<double>(); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (auto& s : sums) CHECK(s.wait_for(std::chrono::milliseconds(0)) == std::future_status::timeout);
  release.set_value();
  for (auto& s : sums) CHECK(s.get() == 2048.0);
  CHECK(runs == 1);
  CHECK(write->done());
}

TEST_CASE("pending write: a bypass thread (a communication worker) reaches the memory without waiting") {
  ls::Tensor t = ls::full({2}, 1.0);
  std::atomic<int> runs{0};
  t.impl()->storage->attach_pending_write(write_later(t, 9.0f, runs));
  std::thread([t] {
    ls::PendingWriteBypass bypass;
    CHECK(ls::PendingWriteBypass::active());
    t.data_ptr<float>()[0] = 4.0f;  // what a receiving collective does
  }).join();
  CHECK_FALSE(ls::PendingWriteBypass::active());
  CHECK(runs == 0);
  CHECK(t.impl()->storage->has_pending_write());
  CHECK(t.to_vector<float>() == std::vector<float>{9, 9});  // the write landed over it
}

TEST_CASE("pending write: a failed write fails every touch with its error, attaching another waits for the first") {
  ls::Tensor t = ls::zeros({3});
  auto failing = std::make_shared<ls::PendingWrite>([] { throw std::runtime_error("the broadcast of rank 1 failed"); });
  t.impl()->storage->attach_pending_write(failing);
  CHECK_THROWS_WITH_AS((void)t.sum(), "the broadcast of rank 1 failed", std::runtime_error);
  CHECK_THROWS_WITH_AS((void)t.clone(), "the broadcast of rank 1 failed", std::runtime_error);
  CHECK(t.impl()->storage->has_pending_write());  // the bytes are unknown: it stays

  ls::Tensor u = ls::zeros({3});
  std::atomic<int> runs{0};
  u.impl()->storage->attach_pending_write(write_later(u, 1.0f, runs));
  u.impl()->storage->attach_pending_write(write_later(u, 2.0f, runs));  // the first lands now
  CHECK(runs == 1);
  CHECK(u.to_vector<float>() == std::vector<float>{2, 2, 2});
  CHECK(runs == 2);
  const uint64_t version = u.impl()->storage->version();
  u.impl()->storage->attach_pending_write(write_later(u, 3.0f, runs));
  (void)u.sum();
  CHECK(u.impl()->storage->version() == version);  // landing does not bump it (its owner bumps when attaching)
}

TEST_CASE("pending write: a finish that waits for a thread touching the storage is an error, not a silent deadlock") {
  setenv("LOCKSTEP_PENDING_WRITE_WAIT_S", "1", 1);
  ls::Tensor t = ls::zeros({4});
  std::string helper_error;
  t.impl()->storage->attach_pending_write(std::make_shared<ls::PendingWrite>([&] {
    // The write's finish hands the filling to a second thread without a
    // PendingWriteBypass (the misuse) and waits for it.
    std::thread helper([&] {
      try {
        t.fill_(2.0);
      } catch (const std::exception& e) {
        helper_error = e.what();
      }
    });
    helper.join();
  }));
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(t.sum().item<float>() == 0.0f);  // the helper gave up; the write landed nothing
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
  CHECK_MESSAGE(helper_error.find("waited 1 s (LOCKSTEP_PENDING_WRITE_WAIT_S)") != std::string::npos, helper_error);
  CHECK_MESSAGE(helper_error.find("give the thread a lockstep::PendingWriteBypass") != std::string::npos, helper_error);
  // With the bypass, the same write works.
  ls::Tensor u = ls::zeros({4});
  u.impl()->storage->attach_pending_write(std::make_shared<ls::PendingWrite>([&] {
    std::thread helper([&] {
      ls::PendingWriteBypass bypass;
      u.fill_(2.0);
    });
    helper.join();
  }));
  CHECK(u.sum().item<float>() == 8.0f);
  unsetenv("LOCKSTEP_PENDING_WRITE_WAIT_S");
}
