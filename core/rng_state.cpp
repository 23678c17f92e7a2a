// core/rng_state.cpp — Generator::get_state / set_state and their tensor forms.
//
// The text is "lockstep-mt19937_64 v1\n", the engine as std::mt19937_64's
// operator<< writes it (312 state words and the position: the standard fixes
// this format), then the Box-Muller spare: a flag and the double's 64 bits.
// Read before: core/rng.h, core/rng_state.h.
#include "core/rng_state.h"

#include <bit>
#include <cstring>
#include <sstream>

#include "core/error.h"
#include "core/factory.h"
#include "core/native/native.h"

namespace lockstep {

namespace {
constexpr const char* kStateHeader = "lockstep-mt19937_64 v1";
}

std::string Generator::get_state() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream out;
  out << kStateHeader << '\n' << engine_ << '\n'
      << (has_spare_normal_ ? 1 : 0) << ' ' << std::bit_cast<uint64_t>(spare_normal_);
  return out.str();
}

void Generator::set_state(const std::string& state) {
  std::istringstream in(state);
  std::string header;
  std::getline(in, header);
  LS_CHECK(header == kStateHeader, "Generator::set_state: the state does not start with \"",
           kStateHeader, "\"; pass what get_state() (or ls::get_rng_state()) returned");
  std::mt19937_64 engine;
  int has_spare = 0;
  uint64_t spare_bits = 0;
  in >> engine >> has_spare >> spare_bits;
  LS_CHECK(!in.fail() && (has_spare == 0 || has_spare == 1),
           "Generator::set_state: the state is truncated or corrupt (", state.size(),
           " bytes); pass what get_state() returned");
  std::lock_guard<std::mutex> lock(mutex_);
  engine_ = engine;
  has_spare_normal_ = has_spare == 1;
  spare_normal_ = std::bit_cast<double>(spare_bits);
}

Tensor get_rng_state(Generator& generator) {
  const std::string s = generator.get_state();
  Tensor t = empty({static_cast<int64_t>(s.size())}, TensorOptions().dtype(kUInt8));
  std::memcpy(t.raw_data(), s.data(), s.size());
  return t;
}

void set_rng_state(const Tensor& state, Generator& generator) {
  LS_CHECK(state.defined() && state.dtype() == kUInt8 && state.dim() == 1,
           "set_rng_state: expected the 1-d uint8 tensor of get_rng_state() but got ",
           state.defined() ? state.shape_str() + " " + dtype_name(state.dtype()) : "an undefined tensor");
  const Tensor host = native::contiguous(native::to_device(state, Device::cpu()));
  const auto* p = static_cast<const char*>(host.raw_data());
  generator.set_state(std::string(p, p + host.numel()));
}

}  // namespace lockstep
