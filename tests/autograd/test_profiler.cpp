// tests/autograd/test_profiler.cpp — ls::profiler: what a training step records,
// nesting (self time), other threads, and that a disabled profiler records nothing.
//
// The model step: conv2d -> relu -> reshape -> linear -> cross_entropy, backward,
// SGD step. Each op, each backward node (named by Node::name()), the whole backward
// pass and the optimizer step must appear with exactly the expected call counts.
// Read before: core/profiler.h, autograd/engine.cpp.
#include <doctest/doctest.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/factory.h"
#include "core/nn_ops.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "optim/sgd.h"

namespace ls = lockstep;
namespace prof = lockstep::profiler;

namespace {

// Leaves the profiler off and empty however a test ends.
struct ProfilerSession {
  ProfilerSession() {
    prof::disable();
    prof::reset();
  }
  ~ProfilerSession() {
    prof::disable();
    prof::reset();
  }
};

std::map<std::string, prof::Entry> by_name() {
  std::map<std::string, prof::Entry> m;
  for (const prof::Entry& e : prof::entries()) m[e.name] = e;
  return m;
}

int64_t calls(const std::map<std::string, prof::Entry>& m, const std::string& name) {
  auto it = m.find(name);
  return it == m.end() ? 0 : it->second.calls;
}

// A tiny CNN classifier: x (4, 3, 8, 8) -> conv 3x3 (6) -> relu -> (4, 216) -> linear (5).
struct TinyStep {
  ls::Tensor conv_w, conv_b, fc_w, fc_b, x, y;
  ls::optim::SGD sgd;

  TinyStep()
      : conv_w(ls::randn({6, 3, 3, 3}).requires_grad_()),
        conv_b(ls::randn({6}).requires_grad_()),
        fc_w(ls::randn({5, 6 * 6 * 6}).requires_grad_()),
        fc_b(ls::randn({5}).requires_grad_()),
        x(ls::randn({4, 3, 8, 8})),
        y(ls::randint(0, 5, {4})),
        sgd({conv_w, conv_b, fc_w, fc_b}, ls::optim::SGDOptions(0.01).momentum(0.9)) {}

  void run() {
    ls::Tensor h = ls::conv2d(x, conv_w, conv_b).relu();                    // (4, 6, 6, 6)
    ls::Tensor logits = ls::linear(h.reshape({4, 6 * 6 * 6}), fc_w, fc_b);  // (4, 5)
    ls::Tensor loss = ls::cross_entropy(logits, y);
    sgd.zero_grad();
    loss.backward();
    sgd.step();
  }
};

}  // namespace

TEST_CASE("profiler: a model step records every op, backward node and the optimizer step") {
  ProfilerSession session;
  ls::manual_seed(3);
  TinyStep step;
  prof::enable();
  step.run();
  step.run();
  prof::disable();
  auto m = by_name();
  // Forward ops, once per step.
  CHECK(calls(m, "conv2d") == 2);
  CHECK(calls(m, "relu") == 2);
  CHECK(calls(m, "reshape") == 2);
  CHECK(calls(m, "linear") == 2);
  CHECK(calls(m, "cross_entropy") == 2);
  // Backward nodes, named by Node::name(), and the four parameters' accumulators.
  CHECK(calls(m, "Conv2dBackward") == 2);
  CHECK(calls(m, "ReluBackward") == 2);
  CHECK(calls(m, "ReshapeBackward") == 2);
  CHECK(calls(m, "LinearBackward") == 2);
  CHECK(calls(m, "CrossEntropyBackward") == 2);
  CHECK(calls(m, "AccumulateGrad") == 8);
  CHECK(calls(m, "autograd.backward") == 2);
  CHECK(calls(m, "optimizer.step") == 2);
  // Backward nodes run inside the backward pass: its total covers theirs.
  const prof::Entry& bw = m.at("autograd.backward");
  CHECK(bw.total_ms >= m.at("Conv2dBackward").total_ms + m.at("LinearBackward").total_ms);
  for (const auto& [name, e] : m) {
    CAPTURE(name);
    CHECK(e.self_ms >= 0.0);
    CHECK(e.self_ms <= e.total_ms + 1e-9);
  }
  // Sorted by total time, largest first.
  const std::vector<prof::Entry> rows = prof::entries();
  for (size_t i = 1; i < rows.size(); ++i) CHECK(rows[i - 1].total_ms >= rows[i].total_ms);
  const std::string table = prof::report();
  CHECK(table.find("Conv2dBackward") != std::string::npos);
  CHECK(table.find("optimizer.step") != std::string::npos);
}

TEST_CASE("profiler: disabled records nothing, and reset forgets") {
  ProfilerSession session;
  ls::manual_seed(4);
  TinyStep step;
  step.run();
  { prof::Scope s("user.scope"); }
  CHECK(prof::entries().empty());

  prof::enable();
  step.run();
  CHECK(calls(by_name(), "conv2d") == 1);
  prof::reset();
  CHECK(prof::entries().empty());
  prof::disable();
  step.run();
  CHECK(prof::entries().empty());
}

TEST_CASE("profiler: nested scopes split total into self time") {
  ProfilerSession session;
  prof::enable();
  {
    prof::Scope outer("outer");
    for (int i = 0; i < 3; ++i) {
      prof::Scope inner("inner");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  prof::disable();
  auto m = by_name();
  REQUIRE(m.count("outer") == 1);
  REQUIRE(m.count("inner") == 1);
  const prof::Entry& outer = m.at("outer");
  const prof::Entry& inner = m.at("inner");
  CHECK(outer.calls == 1);
  CHECK(inner.calls == 3);
  CHECK(inner.total_ms >= 6.0);                             // three sleeps of 2 ms
  CHECK(inner.self_ms == doctest::Approx(inner.total_ms));  // nothing nested in it
  // outer's self time is its total minus exactly the time spent in `inner`.
  CHECK(outer.self_ms == doctest::Approx(outer.total_ms - inner.total_ms).epsilon(1e-9));
  CHECK(outer.total_ms >= inner.total_ms);
}

TEST_CASE("profiler: scopes on other threads are recorded and merged by name") {
  ProfilerSession session;
  prof::enable();
  auto work = [] {
    for (int i = 0; i < 5; ++i) {
      prof::Scope s("worker.task");
    }
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  { prof::Scope s("worker.task"); }
  prof::disable();
  CHECK(calls(by_name(), "worker.task") == 11);
  CHECK(prof::report().find("on 3 thread(s)") != std::string::npos);
}
