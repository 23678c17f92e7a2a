// distributed/store/tcp_store_server.cpp — the poll loop behind TCPStore, and how
// each PyTorch query type is answered (Note [TCPStore protocol]).
// Read before: distributed/store/tcp_store_server.h.
#include "distributed/store/tcp_store_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "distributed/store/store_util.h"

namespace lockstep::distributed {

using wire::Command;

namespace {

// A client that keeps sending while parked cannot make the server buffer more than this.
constexpr size_t kMaxBuffered = 2 * size_t(wire::kMaxValueBytes) + 2 * wire::kMaxKeyBytes + 64;

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace

TCPStoreServer::TCPStoreServer(int port) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  LS_CHECK(listen_fd_ >= 0, "TCPStore server: socket() failed: ", std::strerror(errno));
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listen_fd_, SOMAXCONN) != 0) {
    int err = errno;
    ::close(listen_fd_);
    throw Error(detail::str("TCPStore: rank 0 cannot listen on port ", port, ": ", std::strerror(err),
                            err == EADDRINUSE ? " (another job, or a previous run's server, holds it: "
                                                "choose another MASTER_PORT)"
                                              : ""));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  set_nonblocking(listen_fd_);
  if (::pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    int err = errno;
    ::close(listen_fd_);
    throw Error(detail::str("TCPStore server: pipe() failed: ", std::strerror(err)));
  }
  thread_ = std::thread([this] { loop(); });
}

TCPStoreServer::~TCPStoreServer() {
  stop_ = true;
  char b = 1;
  (void)!::write(wake_pipe_[1], &b, 1);
  if (thread_.joinable()) thread_.join();
  for (auto& [id, c] : conns_) {
    flush(c);  // best effort: replies already decided still go out
    ::close(c.fd);
  }
  ::close(listen_fd_);
  ::close(wake_pipe_[0]);
  ::close(wake_pipe_[1]);
}

void TCPStoreServer::loop() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  while (!stop_) {
    fds.clear();
    ids.clear();
    fds.push_back({wake_pipe_[0], POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (auto& [id, c] : conns_) {
      short events = POLLIN;
      if (c.out_off < c.out.size()) events |= POLLOUT;
      fds.push_back({c.fd, events, 0});
      ids.push_back(id);
    }
    int n = ::poll(fds.data(), fds.size(), runnable_.empty() ? -1 : 0);
    if (n < 0 && errno != EINTR) break;
    if (stop_) break;
    if (n > 0) {
      if (fds[1].revents & POLLIN) accept_all();
      for (size_t i = 0; i < ids.size(); ++i) {
        short ev = fds[i + 2].revents;
        if (ev == 0) continue;
        auto it = conns_.find(ids[i]);
        if (it == conns_.end()) continue;
        bool alive = true;
        if (ev & (POLLIN | POLLHUP | POLLERR)) alive = read_some(it->second);
        if (alive && (ev & POLLOUT)) alive = flush(it->second);
        if (alive && it->second.peer_closed) {
          // A client may send its last requests and close at once (PyTorch's
          // set() has no reply): run what arrived, then close.
          serve(ids[i]);
          alive = false;
        }
        if (!alive) {
          close_connection(ids[i]);
          continue;
        }
        runnable_.push_back(ids[i]);
      }
    }
    while (!runnable_.empty()) {
      uint64_t id = runnable_.front();
      runnable_.pop_front();
      serve(id);
    }
  }
}

void TCPStoreServer::accept_all() {
  for (;;) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a transient error: poll again
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Connection c;
    c.fd = fd;
    conns_.emplace(next_conn_++, std::move(c));
  }
}

bool TCPStoreServer::read_some(Connection& c) {
  uint8_t buf[65536];
  for (;;) {
    ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
    if (n > 0) {
      if (c.in.size() - c.in_off + static_cast<size_t>(n) > kMaxBuffered) return false;
      c.in.insert(c.in.end(), buf, buf + n);
      continue;
    }
    if (n == 0) {  // the client closed; what it sent before still runs
      c.peer_closed = true;
      return true;
    }
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
}

bool TCPStoreServer::flush(Connection& c) {
  while (c.out_off < c.out.size()) {
    ssize_t n = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;  // POLLOUT will resume
    return false;
  }
  c.out.clear();
  c.out_off = 0;
  return true;
}

void TCPStoreServer::reply(Connection& c, const wire::Encoder& e) {
  c.out.insert(c.out.end(), e.buf.begin(), e.buf.end());
}

void TCPStoreServer::serve(uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Connection& c = it->second;
  try {
    while (c.in_off < c.in.size()) {
      wire::Request r;
      size_t used = 0;
      std::string error;
      wire::Parse p = wire::parse_request(c.in.data() + c.in_off, c.in.size() - c.in_off, r, used, error);
      if (p == wire::Parse::kNeedMore) break;
      if (p == wire::Parse::kMalformed || (!c.validated && r.command != Command::kValidate)) {
        ++rejected_;
        close_connection(id);
        return;
      }
      // A parked connection runs nothing but the cancel_wait of its wait.
      if (c.waiter != 0 && r.command != Command::kCancelWait) break;
      c.in_off += used;
      if (!handle(id, c, r)) {
        close_connection(id);
        return;
      }
    }
    if (c.in_off == c.in.size()) {
      c.in.clear();
      c.in_off = 0;
    } else if (c.in_off > (1u << 20)) {
      c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(c.in_off));
      c.in_off = 0;
    }
    if (!flush(c)) close_connection(id);
  } catch (const std::exception&) {
    // Whatever went wrong (e.g. out of memory) concerns this connection only.
    ++rejected_;
    close_connection(id);
  }
}

void TCPStoreServer::write_key(const std::string& key, Bytes value) {
  data_[key] = std::move(value);
  key_changed(key);
}

bool TCPStoreServer::handle(uint64_t id, Connection& c, wire::Request& r) {
  wire::Encoder e;
  const std::string& key = r.keys.empty() ? std::string() : r.keys[0];
  switch (r.command) {
    case Command::kValidate:
      if (r.word != wire::kValidationMagic) {
        ++rejected_;
        return false;
      }
      c.validated = true;
      return true;
    case Command::kPing:
      reply(c, e.u32(r.word));
      return true;
    case Command::kSet:
      write_key(key, std::move(r.value));
      return true;
    case Command::kAppend: {
      Bytes& v = data_[key];
      v.insert(v.end(), r.value.begin(), r.value.end());
      key_changed(key);
      return true;
    }
    case Command::kMultiSet:
      for (size_t i = 0; i < r.keys.size(); ++i) write_key(r.keys[i], std::move(r.values[i]));
      return true;
    case Command::kGet: {  // clients wait first; a key deleted since then reads as empty
      auto it = data_.find(key);
      reply(c, it == data_.end() ? e.u64(0) : e.bytes(it->second));
      return true;
    }
    case Command::kMultiGet:
      for (const auto& k : r.keys) {
        auto it = data_.find(k);
        if (it == data_.end()) e.u64(0);
        else e.bytes(it->second);
      }
      reply(c, e);
      return true;
    case Command::kWait:
      if (has_all(r.keys)) reply(c, e.u8(wire::kWaitStopWaiting));
      else park(id, c, r);
      return true;
    case Command::kCancelWait:
      if (c.waiter != 0) drop_waiter(c.waiter);
      c.waiter = 0;
      reply(c, e.u8(wire::kWaitCanceled));
      return true;
    case Command::kAdd: {
      int64_t value = r.delta;
      auto it = data_.find(key);
      if (it != data_.end()) {
        try {
          value += store_util::parse_counter("TCPStore", key, it->second);
        } catch (const Error&) {
          return false;  // the protocol has no error reply; the client diagnoses the drop
        }
      }
      write_key(key, store_util::format_counter(value));
      reply(c, e.u64(static_cast<uint64_t>(value)));
      return true;
    }
    case Command::kCompareSet: {
      auto it = data_.find(key);
      bool absent = it == data_.end();
      if ((absent && r.value.empty()) || (!absent && it->second == r.value)) {
        reply(c, e.bytes(r.desired));
        write_key(key, std::move(r.desired));
      } else {
        reply(c, e.bytes(absent ? r.value : it->second));
      }
      return true;
    }
    case Command::kCheck:
      reply(c, e.u8(has_all(r.keys) ? wire::kCheckReady : wire::kCheckNotReady));
      return true;
    case Command::kDelete:
      reply(c, e.u64(data_.erase(key)));
      return true;
    case Command::kNumKeys:
      reply(c, e.u64(data_.size()));
      return true;
  }
  return false;
}

bool TCPStoreServer::has_all(const std::vector<std::string>& keys) const {
  for (const auto& k : keys) {
    if (data_.find(k) == data_.end()) return false;
  }
  return true;
}

void TCPStoreServer::park(uint64_t id, Connection& c, wire::Request& r) {
  uint64_t wid = next_waiter_++;
  Waiter w;
  w.conn = id;
  w.keys = std::move(r.keys);
  for (const auto& k : w.keys) {
    if (data_.find(k) == data_.end()) waiting_on_[k].push_back(wid);
  }
  waiters_.emplace(wid, std::move(w));
  c.waiter = wid;
}

void TCPStoreServer::key_changed(const std::string& key) {
  auto it = waiting_on_.find(key);
  if (it == waiting_on_.end()) return;
  std::vector<uint64_t> ready;
  for (uint64_t wid : it->second) {
    auto w = waiters_.find(wid);
    if (w != waiters_.end() && has_all(w->second.keys)) ready.push_back(wid);
  }
  for (uint64_t wid : ready) finish_waiter(wid);
}

void TCPStoreServer::finish_waiter(uint64_t wid) {
  auto w = waiters_.find(wid);
  if (w == waiters_.end()) return;
  const uint64_t conn = w->second.conn;
  drop_waiter(wid);
  auto ci = conns_.find(conn);
  if (ci == conns_.end()) return;
  Connection& c = ci->second;
  reply(c, wire::Encoder().u8(wire::kWaitStopWaiting));
  c.waiter = 0;
  // Send now, before the request that woke us is answered: its sender may be
  // rank 0, about to exit and take this server with it.
  flush(c);
  runnable_.push_back(conn);  // runs any requests queued behind the wait
}

void TCPStoreServer::drop_waiter(uint64_t wid) {
  auto w = waiters_.find(wid);
  if (w == waiters_.end()) return;
  for (const auto& k : w->second.keys) {
    auto it = waiting_on_.find(k);
    if (it == waiting_on_.end()) continue;
    auto& ids = it->second;
    ids.erase(std::remove(ids.begin(), ids.end(), wid), ids.end());
    if (ids.empty()) waiting_on_.erase(it);
  }
  waiters_.erase(w);
}

void TCPStoreServer::close_connection(uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  if (it->second.waiter != 0) drop_waiter(it->second.waiter);
  ::close(it->second.fd);
  conns_.erase(it);
}

}  // namespace lockstep::distributed
