// distributed/store/tcp_store_protocol.h — the TCPStore wire format: commands,
// limits, and the encoder/decoder both sides use (Note [TCPStore protocol] in
// distributed/store/tcp_store.h describes the messages).
//
// Decoding is incremental and validating: parse_request() looks at the bytes
// received so far and answers kNeedMore (wait for more), kOk (one whole
// request, and how many bytes it used) or kMalformed (with the reason) — an
// unknown command or a length over the limits is rejected from its header,
// before any memory is reserved for it.
// Read before: distributed/store/tcp_store.h. Read next: distributed/store/tcp_store_server.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "distributed/store/store.h"

namespace lockstep::distributed::wire {

enum class Command : uint8_t {
  kSet = 1,
  kGet = 2,
  kAdd = 3,
  kCompareSet = 4,
  kWait = 5,
  kCheck = 6,
  kDelete = 7,
  kNumKeys = 8,
};
const char* command_name(Command c);

enum class Status : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

constexpr uint32_t kMaxKeyBytes = 1u << 20;     // 1 MiB
constexpr uint32_t kMaxValueBytes = 64u << 20;  // 64 MiB
constexpr uint32_t kMaxKeysPerRequest = 1u << 16;

struct Request {
  Command command = Command::kSet;
  std::vector<std::string> keys;  // one key, or the list of kWait / kCheck
  Bytes value;                    // kSet value; kCompareSet expected
  Bytes desired;                  // kCompareSet
  int64_t delta = 0;              // kAdd
  uint64_t timeout_ms = 0;        // kGet, kWait
};

enum class Parse { kOk, kNeedMore, kMalformed };
Parse parse_request(const uint8_t* data, size_t size, Request& out, size_t& consumed, std::string& error);

// Little-endian appenders for building messages.
struct Encoder {
  Bytes buf;
  Encoder& u8(uint8_t v) {
    buf.push_back(v);
    return *this;
  }
  Encoder& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) buf.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  Encoder& u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) buf.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  Encoder& bytes(const uint8_t* p, size_t n) {
    u32(static_cast<uint32_t>(n));
    buf.insert(buf.end(), p, p + n);
    return *this;
  }
  Encoder& str(const std::string& s) { return bytes(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }
  Encoder& bytes(const Bytes& b) { return bytes(b.data(), b.size()); }
};

// Reads little-endian fields from a complete buffer; ok() turns false on overrun.
class Decoder {
 public:
  Decoder(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  bool ok() const { return ok_; }
  size_t used() const { return off_; }
  size_t left() const { return ok_ ? n_ - off_ : 0; }
  uint8_t u8() { return static_cast<uint8_t>(take(1)); }
  uint32_t u32() { return static_cast<uint32_t>(take(4)); }
  uint64_t u64() { return take(8); }
  // A u32 length then that many bytes; fails if the length exceeds `limit`.
  bool bytes(Bytes& out, uint32_t limit) {
    uint32_t n = u32();
    if (!ok_ || n > limit || n > n_ - off_) return ok_ = false;
    out.assign(p_ + off_, p_ + off_ + n);
    off_ += n;
    return true;
  }
  bool str(std::string& out, uint32_t limit) {
    uint32_t n = u32();
    if (!ok_ || n > limit || n > n_ - off_) return ok_ = false;
    out.assign(reinterpret_cast<const char*>(p_ + off_), n);
    off_ += n;
    return true;
  }

 private:
  uint64_t take(int bytes) {
    if (!ok_ || n_ - off_ < static_cast<size_t>(bytes)) {
      ok_ = false;
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint64_t(p_[off_ + i]) << (8 * i);
    off_ += bytes;
    return v;
  }
  const uint8_t* p_;
  size_t n_;
  size_t off_ = 0;
  bool ok_ = true;
};

}  // namespace lockstep::distributed::wire
