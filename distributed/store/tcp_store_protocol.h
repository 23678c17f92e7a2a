// distributed/store/tcp_store_protocol.h — the TCPStore wire format (PyTorch's c10d
// TCPStore protocol, Note [TCPStore protocol] in distributed/store/tcp_store.h):
// query types, limits, and the encoder/decoder both sides use.
//
// Decoding is incremental and validating: parse_request() looks at the bytes
// received so far and answers kNeedMore (wait for more), kOk (one whole
// request, and how many bytes it used) or kMalformed (with the reason) — an
// unknown query type or a length over the limits is rejected from its header,
// before any memory is reserved for it.
// Read before: distributed/store/tcp_store.h. Read next: distributed/store/tcp_store_server.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "distributed/store/store.h"

namespace lockstep::distributed::wire {

// The query type byte, numbered as PyTorch's c10d::detail::QueryType.
enum class Command : uint8_t {
  kValidate = 0,
  kSet = 1,
  kCompareSet = 2,
  kGet = 3,
  kAdd = 4,
  kCheck = 5,
  kWait = 6,
  kNumKeys = 7,
  kDelete = 8,
  kAppend = 9,
  kMultiGet = 10,
  kMultiSet = 11,
  kCancelWait = 12,
  kPing = 13,
  // 14..18 (queue_push, queue_pop, queue_len, list_keys, barrier) exist in
  // PyTorch but are not served: parse_request() rejects them by name.
};
constexpr uint8_t kLastServed = uint8_t(Command::kPing);
const char* command_name(Command c);

// The first message on every connection: kValidate and this u32.
constexpr uint32_t kValidationMagic = 0x3C85F7CE;
// Replies to kCheck and kWait (PyTorch's CheckResponseType, WaitResponseType).
constexpr uint8_t kCheckReady = 0, kCheckNotReady = 1;
constexpr uint8_t kWaitStopWaiting = 0, kWaitCanceled = 1;

constexpr uint64_t kMaxKeyBytes = 1u << 20;     // 1 MiB
constexpr uint64_t kMaxValueBytes = 64u << 20;  // 64 MiB
constexpr uint64_t kMaxKeysPerRequest = 1u << 16;

struct Request {
  Command command = Command::kSet;
  std::vector<std::string> keys;  // one key, or the list of wait / check / multi_get / multi_set
  Bytes value;                    // set / append value; compare_set expected
  Bytes desired;                  // compare_set
  std::vector<Bytes> values;      // multi_set, one per key
  int64_t delta = 0;              // add
  uint32_t word = 0;              // validate: the magic number; ping: the nonce
};

enum class Parse { kOk, kNeedMore, kMalformed };
Parse parse_request(const uint8_t* data, size_t size, Request& out, size_t& consumed, std::string& error);

// Little-endian appenders for building messages; strings and byte strings are
// a u64 length and the bytes.
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
    u64(n);
    buf.insert(buf.end(), p, p + n);
    return *this;
  }
  Encoder& str(const std::string& s) { return bytes(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }
  Encoder& bytes(const Bytes& b) { return bytes(b.data(), b.size()); }
  Encoder& append(const Encoder& other) {
    buf.insert(buf.end(), other.buf.begin(), other.buf.end());
    return *this;
  }
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
  // A u64 length then that many bytes; fails if the length exceeds `limit`.
  bool bytes(Bytes& out, uint64_t limit) {
    uint64_t n = u64();
    if (!ok_ || n > limit || n > n_ - off_) return ok_ = false;
    out.assign(p_ + off_, p_ + off_ + n);
    off_ += n;
    return true;
  }
  bool str(std::string& out, uint64_t limit) {
    uint64_t n = u64();
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
