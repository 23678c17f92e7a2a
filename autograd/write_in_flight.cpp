// autograd/write_in_flight.cpp — the marked storages (Note [Reads of a tensor
// still being written], autograd/write_in_flight.h).
// Read before: autograd/write_in_flight.h. Read next: autograd/function.cpp.
#include "autograd/write_in_flight.h"

#include <mutex>
#include <unordered_map>

#include "core/error.h"
#include "core/tensor_impl.h"

namespace lockstep::autograd {

std::atomic<int64_t> storages_written_in_flight{0};

namespace {
struct Mark {
  Storage storage;  // kept alive, so that its address names no other storage while marked
  std::string message;
  int count = 0;
};

std::mutex& marks_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<const StorageImpl*, Mark>& marks() {
  static std::unordered_map<const StorageImpl*, Mark> m;
  return m;
}
}  // namespace

void mark_write_in_flight(const Tensor& t, std::string message) {
  LS_CHECK(t.defined(), "mark_write_in_flight: undefined tensor");
  std::lock_guard<std::mutex> lock(marks_mutex());
  Mark& m = marks()[t.impl()->storage.get()];
  if (m.count++ == 0) storages_written_in_flight.fetch_add(1, std::memory_order_release);
  m.storage = t.impl()->storage;
  m.message = std::move(message);
}

void unmark_write_in_flight(const Tensor& t) {
  if (!t.defined()) return;
  std::lock_guard<std::mutex> lock(marks_mutex());
  const auto it = marks().find(t.impl()->storage.get());
  if (it == marks().end()) return;
  if (--it->second.count == 0) {
    marks().erase(it);
    storages_written_in_flight.fetch_sub(1, std::memory_order_release);
  }
}

bool write_in_flight(const Tensor& t) {
  if (!t.defined()) return false;
  std::lock_guard<std::mutex> lock(marks_mutex());
  return marks().count(t.impl()->storage.get()) != 0;
}

void check_no_write_in_flight_slow(const std::vector<Tensor>& inputs) {
  std::lock_guard<std::mutex> lock(marks_mutex());
  for (const Tensor& t : inputs) {
    if (!t.defined()) continue;
    const auto it = marks().find(t.impl()->storage.get());
    if (it == marks().end()) continue;
    throw Error(lockstep::detail::str("an op read a tensor of shape ", t.shape_str(),
                                      " whose values are still being written: ", it->second.message));
  }
}

}  // namespace lockstep::autograd
