// distributed/store/tcp_store_protocol.cpp — incremental, validating request parser.
// Read before: distributed/store/tcp_store_protocol.h.
#include "distributed/store/tcp_store_protocol.h"

namespace lockstep::distributed::wire {

const char* command_name(Command c) {
  switch (c) {
    case Command::kValidate: return "validate";
    case Command::kSet: return "set";
    case Command::kCompareSet: return "compare_set";
    case Command::kGet: return "get";
    case Command::kAdd: return "add";
    case Command::kCheck: return "check";
    case Command::kWait: return "wait";
    case Command::kNumKeys: return "num_keys";
    case Command::kDelete: return "delete_key";
    case Command::kAppend: return "append";
    case Command::kMultiGet: return "multi_get";
    case Command::kMultiSet: return "multi_set";
    case Command::kCancelWait: return "cancel_wait";
    case Command::kPing: return "ping";
  }
  return "unknown";
}

namespace {

const char* unserved_name(uint8_t type) {
  switch (type) {
    case 14: return "queue_push";
    case 15: return "queue_pop";
    case 16: return "queue_len";
    case 17: return "list_keys";
    case 18: return "barrier";
  }
  return nullptr;
}

// A cursor over the received bytes that distinguishes "not here yet" from
// "can never be valid": each length is checked against its limit as soon as
// its 8 bytes arrive.
class Cursor {
 public:
  Cursor(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  Parse state = Parse::kOk;
  std::string error;
  size_t off = 0;

  bool need(uint64_t k) {
    if (state != Parse::kOk) return false;
    if (n_ - off < k) {
      state = Parse::kNeedMore;
      return false;
    }
    return true;
  }
  uint64_t fixed(int k) {
    if (!need(static_cast<uint64_t>(k))) return 0;
    uint64_t v = 0;
    for (int i = 0; i < k; ++i) v |= uint64_t(p_[off + i]) << (8 * i);
    off += k;
    return v;
  }
  uint64_t length(uint64_t limit, const char* what) {
    uint64_t len = fixed(8);
    if (state == Parse::kOk && len > limit) {
      state = Parse::kMalformed;
      error = std::string(what) + " of " + std::to_string(len) + " bytes exceeds the limit of " +
              std::to_string(limit);
    }
    return len;
  }
  void field(std::string& out, uint64_t limit, const char* what) {
    uint64_t len = length(limit, what);
    if (!need(len)) return;
    out.assign(reinterpret_cast<const char*>(p_ + off), len);
    off += len;
  }
  void field(Bytes& out, uint64_t limit, const char* what) {
    uint64_t len = length(limit, what);
    if (!need(len)) return;
    out.assign(p_ + off, p_ + off + len);
    off += len;
  }
  uint64_t count(const char* what) {
    uint64_t n = fixed(8);
    if (state == Parse::kOk && n > kMaxKeysPerRequest) {
      state = Parse::kMalformed;
      error = std::string(what) + " " + std::to_string(n) + " exceeds the limit of " +
              std::to_string(kMaxKeysPerRequest);
    }
    return n;
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

}  // namespace

Parse parse_request(const uint8_t* data, size_t size, Request& out, size_t& consumed, std::string& error) {
  Cursor c(data, size);
  uint8_t type = static_cast<uint8_t>(c.fixed(1));
  if (c.state != Parse::kOk) return c.state;
  if (type > kLastServed) {
    const char* name = unserved_name(type);
    error = name != nullptr ? std::string("query '") + name + "' (" + std::to_string(type) +
                                  ") is not served by lockstep's TCPStore"
                            : "unknown query type byte " + std::to_string(type);
    return Parse::kMalformed;
  }
  out = Request{};
  out.command = static_cast<Command>(type);
  auto one_key = [&] {
    out.keys.resize(1);
    c.field(out.keys[0], kMaxKeyBytes, "key");
  };
  switch (out.command) {
    case Command::kValidate:
    case Command::kPing:
      out.word = static_cast<uint32_t>(c.fixed(4));
      break;
    case Command::kSet:
    case Command::kAppend:
      one_key();
      c.field(out.value, kMaxValueBytes, "value");
      break;
    case Command::kGet:
    case Command::kDelete:
      one_key();
      break;
    case Command::kAdd:
      one_key();
      out.delta = static_cast<int64_t>(c.fixed(8));
      break;
    case Command::kCompareSet:
      one_key();
      c.field(out.value, kMaxValueBytes, "expected value");
      c.field(out.desired, kMaxValueBytes, "desired value");
      break;
    case Command::kWait:
    case Command::kCheck:
    case Command::kMultiGet:
    case Command::kMultiSet: {
      const bool with_values = out.command == Command::kMultiSet;
      uint64_t n = c.count("key count");
      for (uint64_t i = 0; i < n && c.state == Parse::kOk; ++i) {
        out.keys.emplace_back();
        c.field(out.keys.back(), kMaxKeyBytes, "key");
        if (with_values) {
          out.values.emplace_back();
          c.field(out.values.back(), kMaxValueBytes, "value");
        }
      }
      break;
    }
    case Command::kNumKeys:
    case Command::kCancelWait:
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
