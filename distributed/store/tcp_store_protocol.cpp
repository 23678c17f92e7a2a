// distributed/store/tcp_store_protocol.cpp — incremental, validating request parser.
// Read before: distributed/store/tcp_store_protocol.h.
#include "distributed/store/tcp_store_protocol.h"

namespace lockstep::distributed::wire {

const char* command_name(Command c) {
  switch (c) {
    case Command::kSet: return "set";
    case Command::kGet: return "get";
    case Command::kAdd: return "add";
    case Command::kCompareSet: return "compare_set";
    case Command::kWait: return "wait";
    case Command::kCheck: return "check";
    case Command::kDelete: return "delete_key";
    case Command::kNumKeys: return "num_keys";
  }
  return "unknown";
}

namespace {

// A cursor over the received bytes that distinguishes "not here yet" from
// "can never be valid": each length is checked against its limit as soon as
// its 4 bytes arrive.
class Cursor {
 public:
  Cursor(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  Parse state = Parse::kOk;
  std::string error;
  size_t off = 0;

  bool need(size_t k) {
    if (state != Parse::kOk) return false;
    if (n_ - off < k) {
      state = Parse::kNeedMore;
      return false;
    }
    return true;
  }
  uint64_t fixed(int k) {
    if (!need(k)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < k; ++i) v |= uint64_t(p_[off + i]) << (8 * i);
    off += k;
    return v;
  }
  uint32_t length(uint32_t limit, const char* what) {
    uint32_t len = static_cast<uint32_t>(fixed(4));
    if (state == Parse::kOk && len > limit) {
      state = Parse::kMalformed;
      error = std::string(what) + " of " + std::to_string(len) + " bytes exceeds the limit of " +
              std::to_string(limit);
    }
    return len;
  }
  void field(std::string& out, uint32_t limit, const char* what) {
    uint32_t len = length(limit, what);
    if (!need(len)) return;
    out.assign(reinterpret_cast<const char*>(p_ + off), len);
    off += len;
  }
  void field(Bytes& out, uint32_t limit, const char* what) {
    uint32_t len = length(limit, what);
    if (!need(len)) return;
    out.assign(p_ + off, p_ + off + len);
    off += len;
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

}  // namespace

Parse parse_request(const uint8_t* data, size_t size, Request& out, size_t& consumed, std::string& error) {
  Cursor c(data, size);
  uint8_t cmd = static_cast<uint8_t>(c.fixed(1));
  if (c.state != Parse::kOk) return c.state;
  if (cmd < uint8_t(Command::kSet) || cmd > uint8_t(Command::kNumKeys)) {
    error = "unknown command byte " + std::to_string(cmd);
    return Parse::kMalformed;
  }
  out = Request{};
  out.command = static_cast<Command>(cmd);
  switch (out.command) {
    case Command::kSet:
      out.keys.resize(1);
      c.field(out.keys[0], kMaxKeyBytes, "key");
      c.field(out.value, kMaxValueBytes, "value");
      break;
    case Command::kGet:
      out.keys.resize(1);
      c.field(out.keys[0], kMaxKeyBytes, "key");
      out.timeout_ms = c.fixed(8);
      break;
    case Command::kAdd:
      out.keys.resize(1);
      c.field(out.keys[0], kMaxKeyBytes, "key");
      out.delta = static_cast<int64_t>(c.fixed(8));
      break;
    case Command::kCompareSet:
      out.keys.resize(1);
      c.field(out.keys[0], kMaxKeyBytes, "key");
      c.field(out.value, kMaxValueBytes, "expected value");
      c.field(out.desired, kMaxValueBytes, "desired value");
      break;
    case Command::kWait:
    case Command::kCheck: {
      uint32_t n = c.length(kMaxKeysPerRequest, "key count");
      for (uint32_t i = 0; i < n && c.state == Parse::kOk; ++i) {
        out.keys.emplace_back();
        c.field(out.keys.back(), kMaxKeyBytes, "key");
      }
      if (out.command == Command::kWait) out.timeout_ms = c.fixed(8);
      break;
    }
    case Command::kDelete:
      out.keys.resize(1);
      c.field(out.keys[0], kMaxKeyBytes, "key");
      break;
    case Command::kNumKeys:
      break;
  }
  if (c.state == Parse::kMalformed) {
    error = std::string(command_name(out.command)) + " request: " + c.error;
  } else if (c.state == Parse::kOk) {
    consumed = c.off;
  }
  return c.state;
}

}  // namespace lockstep::distributed::wire
