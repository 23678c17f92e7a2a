// distributed/store/tcp_store_server.h — the server half of TCPStore, run by rank 0.
//
// One background thread owns everything: a listening socket, the accepted
// connections, the key-value map and the lists of blocked requests. It sleeps
// in poll() on all sockets plus a wake-up pipe, with poll's timeout set to the
// nearest waiter deadline, so an idle server uses no CPU and a blocking get()
// costs nothing until the key arrives (no busy polling anywhere).
//
// It serves lockstep's clients and PyTorch's (the protocol is PyTorch's, Note
// [TCPStore protocol]). Each connection must open with a validate message
// carrying the magic number; then it runs its requests in order. A wait whose
// keys are missing parks the connection (it runs no further requests but a
// cancel_wait) and registers a waiter under each missing key; a write to such
// a key re-checks those waiters. The server keeps no deadlines: a client that
// gives up sends cancel_wait (or closes). A missing validate, a malformed or
// oversized request, an add on a non-integer value, a client that closes
// mid-request, or any error while serving one connection closes that
// connection only.
// Read before: distributed/store/tcp_store.h (Note [TCPStore protocol]),
// distributed/store/tcp_store_protocol.h. Read next: distributed/store/tcp_store_server.cpp.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "distributed/store/tcp_store_protocol.h"

namespace lockstep::distributed {

class TCPStoreServer {
 public:
  // Listens on every interface at `port` (0: a free port, see port()).
  // Throws naming the port when it cannot listen (e.g. already in use).
  explicit TCPStoreServer(int port);
  ~TCPStoreServer();  // stops the thread and closes every connection
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;

  int port() const { return port_; }
  // Connections closed because of a malformed or oversized request or a
  // missing validate (for tests, logs).
  int64_t rejected_connections() const { return rejected_.load(); }

 private:
  struct Connection {
    int fd = -1;
    Bytes in;           // received, not yet parsed
    size_t in_off = 0;  // parsed prefix of `in`
    Bytes out;          // replies not yet sent
    size_t out_off = 0;
    uint64_t waiter = 0;  // the waiter this connection is parked on (0: none)
    bool validated = false;
    bool peer_closed = false;  // read EOF: serve what is buffered, then close
  };
  struct Waiter {
    uint64_t conn = 0;
    std::vector<std::string> keys;
  };

  void loop();
  void accept_all();
  bool read_some(Connection& c);   // false: error or over the buffer limit; EOF sets peer_closed
  bool flush(Connection& c);       // false: peer gone or error
  void serve(uint64_t id);         // runs the connection's buffered requests
  // Runs one request; false: close the connection (a bad validate, an add on a non-integer).
  bool handle(uint64_t id, Connection& c, wire::Request& r);
  void write_key(const std::string& key, Bytes value);
  void close_connection(uint64_t id);
  void reply(Connection& c, const wire::Encoder& e);

  bool has_all(const std::vector<std::string>& keys) const;
  void park(uint64_t id, Connection& c, wire::Request& r);
  void key_changed(const std::string& key);
  void finish_waiter(uint64_t waiter_id);
  void drop_waiter(uint64_t waiter_id);

  int port_ = 0;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> rejected_{0};
  std::thread thread_;

  // Owned by the loop thread.
  std::unordered_map<std::string, Bytes> data_;
  std::map<uint64_t, Connection> conns_;
  uint64_t next_conn_ = 1;
  std::map<uint64_t, Waiter> waiters_;
  uint64_t next_waiter_ = 1;
  std::unordered_map<std::string, std::vector<uint64_t>> waiting_on_;  // key -> waiter ids
  std::deque<uint64_t> runnable_;  // connections unparked, with requests maybe pending
};

}  // namespace lockstep::distributed
