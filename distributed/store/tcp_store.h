// distributed/store/tcp_store.h — TCPStore: the Store every rank reaches over TCP.
//
// Rank 0 constructs it with is_master = true: that starts a TCPStoreServer
// (a background thread, distributed/store/tcp_store_server.h) listening on
// MASTER_PORT, and then connects to it like everyone else. The other ranks
// connect to MASTER_ADDR:MASTER_PORT, retrying with exponential backoff
// (10 ms doubling to 250 ms) until the timeout, since rank 0 may start later;
// after 3 s they print one "waiting for rank 0 at HOST:PORT" line (Note [Waiting
// for the store] in tcp_store.cpp). A handshake answer no TCPStore sends (an
// HTTP server's 'H') is reported as a foreign service on the port.
// One TCPStore is one connection; its calls are serialized by a mutex, so
// threads may share it, but a blocking get() holds it until answered.
//
// § Note [TCPStore protocol]
// The protocol is PyTorch's c10d TCPStore protocol, so a lockstep rank can join
// a store PyTorch hosts (torchrun's agent store, either PyTorch server backend:
// libuv or the classic one) and a torch.distributed.TCPStore client can use a
// store lockstep hosts. Fields are little-endian: u8, u32, i64/u64, and
// "string" = u64 length + that many bytes. Every message starts with its
// query type byte (PyTorch's QueryType numbering, wire::Command):
//   request                                      reply
//   0  VALIDATE    magic:u32 (0x3C85F7CE)        - (must open every connection)
//   13 PING        nonce:u32                     nonce:u32
//   1  SET         key value                     -
//   2  COMPARE_SET key expected desired          value_now:string
//   3  GET         key                           value:string (empty if absent)
//   4  ADD         key delta:i64                 new_value:i64
//   5  CHECK       n:u64 key x n                 u8: 0 all present, 1 not
//   6  WAIT        n:u64 key x n                 u8 0 (STOP_WAITING) once all exist
//   12 CANCEL_WAIT                               u8 1 (WAIT_CANCELED)
//   7  GETNUMKEYS                                count:i64
//   8  DELETE_KEY  key                           deleted:i64 (0 or 1)
//   9  APPEND key value -;  10 MULTI_GET n key x n -> value x n;  11 MULTI_SET n (key value) x n -> -
// The client opens with VALIDATE and PING (the echoed nonce proves a TCPStore
// answers). The server keeps no deadlines: a client waits for the WAIT reply
// until its own timeout, then sends CANCEL_WAIT and reads up to WAIT_CANCELED
// (a STOP_WAITING may come first: then the keys did arrive). get() is WAIT
// then GET. The protocol has no error reply: the server closes a connection
// that sends garbage, skips VALIDATE, or ADDs to a non-integer value; lockstep's
// client reconnects and explains (an add() reads the value to name it). SET
// has no reply either; lockstep's client follows it with a PING so that a set()
// has reached the server when it returns (rank 0 may exit right after).
// Keys: like PyTorch's client, lockstep's client prefixes every key with "/",
// so key "k" is the same key for both; counters are decimal text. Limits of
// lockstep's server, checked as soon as a length field arrives: keys ≤ 1 MiB,
// values ≤ 64 MiB, ≤ 65536 keys in one request (PyTorch's libuv server allows
// 8 KiB keys and 8 MiB values). Queries 14-18 (queues, list_keys, barrier) are
// not served: the connection is closed, the server and other clients carry on.
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
  void handshake(Clock::time_point deadline);        // VALIDATE + PING; throws for a foreign service
  // Sends `request` (reconnecting first if a call lost the connection); the reply is read with read_*.
  void send_request(wire::Command cmd, const wire::Encoder& request, Clock::time_point deadline);
  // WAIT for `keys` (already prefixed) until `deadline`; false: timed out (and cancelled).
  bool wait_prefixed(const std::vector<std::string>& keys, Clock::time_point deadline);
  void ping(Clock::time_point deadline);
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
  bool closed_by_server_ = false;                // the last failure was the server closing
  uint32_t nonce_ = 0;
};

}  // namespace lockstep::distributed
