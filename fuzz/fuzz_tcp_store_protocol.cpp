// fuzz/fuzz_tcp_store_protocol.cpp — libFuzzer target for the TCPStore wire
// protocol (distributed/store/tcp_store_protocol.h): the server's request parser and
// the Decoder the client reads replies with. Each input is a byte stream as a
// server would receive it. For every request in it:
//   - parse_request answers kOk, kNeedMore or kMalformed, never crashes or
//     reserves memory a length field claims before the bytes are there;
//   - kMalformed comes with a reason; kOk consumes between 1 and size bytes;
//   - the request re-encodes to exactly the bytes it consumed, and every proper
//     prefix of those bytes answers kNeedMore (the parser is incremental: a
//     request split across recv() calls parses the same as a whole one).
// Then the same bytes are read as replies with the Decoder, which must never
// read past the buffer. Seeds: fuzz/make_seeds.cpp.
// Read before: distributed/store/tcp_store_protocol.h. Read next: fuzz/CMakeLists.txt.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "distributed/store/tcp_store_protocol.h"

namespace wire = lockstep::distributed::wire;

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_tcp_store_protocol: %s\n", what.c_str());
  std::abort();
}

// The bytes a client sends for `r` (the layout of Note [TCPStore protocol]).
lockstep::distributed::Bytes encode(const wire::Request& r) {
  wire::Encoder e;
  e.u8(static_cast<uint8_t>(r.command));
  switch (r.command) {
    case wire::Command::kValidate:
    case wire::Command::kPing: e.u32(r.word); break;
    case wire::Command::kSet:
    case wire::Command::kAppend: e.str(r.keys.at(0)).bytes(r.value); break;
    case wire::Command::kGet:
    case wire::Command::kDelete: e.str(r.keys.at(0)); break;
    case wire::Command::kAdd: e.str(r.keys.at(0)).u64(static_cast<uint64_t>(r.delta)); break;
    case wire::Command::kCompareSet: e.str(r.keys.at(0)).bytes(r.value).bytes(r.desired); break;
    case wire::Command::kWait:
    case wire::Command::kCheck:
    case wire::Command::kMultiGet:
    case wire::Command::kMultiSet:
      e.u64(r.keys.size());
      for (size_t i = 0; i < r.keys.size(); ++i) {
        e.str(r.keys[i]);
        if (r.command == wire::Command::kMultiSet) e.bytes(r.values.at(i));
      }
      break;
    case wire::Command::kNumKeys:
    case wire::Command::kCancelWait: break;
  }
  return e.buf;
}

void check_prefix(const uint8_t* data, size_t len) {
  wire::Request r;
  size_t used = 0;
  std::string error;
  if (wire::parse_request(data, len, r, used, error) != wire::Parse::kNeedMore)
    fail("a proper prefix of a valid request did not answer kNeedMore (prefix of " +
         std::to_string(len) + " bytes)");
}

void fuzz_replies(const uint8_t* data, size_t size) {
  // Reply shapes the client reads: a value, a string, an i64 or a u32 nonce.
  wire::Decoder d(data, size);
  while (d.ok() && d.left() > 0) {
    const uint8_t what = d.u8();
    lockstep::distributed::Bytes value;
    std::string key;
    switch (what % 4) {
      case 0: d.bytes(value, wire::kMaxValueBytes); break;
      case 1: d.str(key, wire::kMaxKeyBytes); break;
      case 2: (void)d.u64(); break;
      default: (void)d.u32(); break;
    }
    if (d.used() > size) fail("Decoder read past the end of the buffer");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t off = 0;
  while (off < size) {
    wire::Request r;
    size_t used = 0;
    std::string error;
    const wire::Parse p = wire::parse_request(data + off, size - off, r, used, error);
    if (p == wire::Parse::kNeedMore) break;
    if (p == wire::Parse::kMalformed) {
      if (error.empty()) fail("kMalformed without a reason");
      break;
    }
    if (used == 0 || used > size - off) fail("kOk consumed " + std::to_string(used) + " of " +
                                             std::to_string(size - off) + " bytes");
    const auto again = encode(r);
    if (again.size() != used || !std::equal(again.begin(), again.end(), data + off))
      fail(std::string("a parsed ") + wire::command_name(r.command) +
           " request does not re-encode to the bytes it was parsed from");
    // Every proper prefix is incomplete, not malformed: the short ones and a few
    // spread over the rest (all of them would make long inputs quadratic).
    for (size_t len = 0; len < used && len < 16; ++len) check_prefix(data + off, len);
    for (size_t len : {used / 3, used / 2, used - 1}) check_prefix(data + off, len);
    off += used;
  }
  fuzz_replies(data, size);
  return 0;
}
