// distributed/store/tcp_store.h — TCPStore: the Store every rank reaches over TCP.
//
// Rank 0 constructs it with is_master = true: that starts a TCPStoreServer
// (a background thread, distributed/store/tcp_store_server.h) listening on
// MASTER_PORT, and then connects to it like everyone else. The other ranks
// connect to MASTER_ADDR:MASTER_PORT, retrying with exponential backoff
// (10 ms doubling to 250 ms) until the timeout, since rank 0 may start later;
// after 3 s they print one "waiting for rank 0 at HOST:PORT" line (Note [Waiting
// for the store] in tcp_store.cpp). A reply no lockstep server sends (an HTTP
// server's 'H') is reported as a foreign service on the port.
// One TCPStore is one connection; its calls are serialized by a mutex, so
// threads may share it, but a blocking get() holds it until answered.
//
// Note [TCPStore protocol]
// Every message is a sequence of little-endian fields: u8, u32, u64, and
// "bytes" = u32 length + that many bytes. A client sends one request, reads
// its reply, and only then sends the next.
//   request                                          reply (after u8 status)
//   1 SET     key:bytes value:bytes                  -
//   2 GET     key:bytes timeout_ms:u64               OK value:bytes | TIMEOUT
//   3 ADD     key:bytes delta:u64 (two's complement) OK new_value:u64 | ERROR msg:bytes
//   4 CMPSET  key:bytes expected:bytes desired:bytes OK value_now:bytes
//   5 WAIT    n:u32 key:bytes x n timeout_ms:u64     OK | TIMEOUT n:u32 missing_key:bytes x n
//   6 CHECK   n:u32 key:bytes x n                    OK all_present:u8
//   7 DELETE  key:bytes                              OK existed:u8
//   8 NUMKEYS                                        OK count:u64
// Status: 0 OK, 1 TIMEOUT, 2 ERROR. GET and WAIT block on the server (the
// connection is parked on a waiter list until the keys are set or timeout_ms
// passes, then the server itself answers TIMEOUT); the client adds a grace of
// 5 s to its own read deadline only to survive a dead server. Counters (ADD)
// are stored as decimal text. Limits, checked as soon as a length field
// arrives: keys ≤ 1 MiB, values ≤ 64 MiB, ≤ 65536 keys in one WAIT/CHECK. An
// unknown command byte or a length over its limit closes that connection
// (the client sees the connection drop); the server and the other
// connections carry on.
//
// Read before: distributed/store/store.h, distributed/store/hash_store.h.
// Read next: distributed/store/tcp_store_protocol.h, distributed/store/tcp_store_server.h,
// distributed/rendezvous.h.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "distributed/store/store.h"
#include "distributed/store/tcp_store_protocol.h"

namespace lockstep::distributed {

class TCPStoreServer;

class TCPStore : public Store {
 public:
  // is_master: also host the server (port 0 picks a free one; see port()).
  // `timeout` bounds connecting and is the default for get()/wait().
  TCPStore(std::string host, int port, bool is_master,
           std::chrono::milliseconds timeout = kDefaultTimeout);
  ~TCPStore() override;

  using Store::set;
  using Store::wait;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  bool is_master() const { return server_ != nullptr; }
  const TCPStoreServer* server() const { return server_.get(); }  // null unless master

 private:
  using Clock = std::chrono::steady_clock;

  void connect(std::chrono::milliseconds timeout);  // with backoff; throws naming host:port
  // Sends `request`, reads the u8 status; the rest of the reply is read with read_*.
  wire::Status send_request(wire::Command cmd, const wire::Encoder& request, Clock::time_point deadline);
  void read_exact(uint8_t* p, size_t n, Clock::time_point deadline);
  uint8_t read_u8(Clock::time_point deadline);
  uint32_t read_u32(Clock::time_point deadline);
  uint64_t read_u64(Clock::time_point deadline);
  Bytes read_bytes(Clock::time_point deadline);
  [[noreturn]] void fail(const std::string& what);  // closes the socket, throws naming the server
  std::string where() const;

  std::string host_;
  int port_;
  std::unique_ptr<TCPStoreServer> server_;
  std::mutex mutex_;
  int fd_ = -1;
  wire::Command current_ = wire::Command::kSet;  // the request in flight, for errors
};

}  // namespace lockstep::distributed
