// distributed/store/tcp_store_server.cpp — the poll loop behind TCPStore.
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
using wire::Status;

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
    int n = ::poll(fds.data(), fds.size(), poll_timeout_ms());
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
        if (!alive) {
          close_connection(ids[i]);
          continue;
        }
        runnable_.push_back(ids[i]);
      }
    }
    expire_waiters();
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
    if (n == 0) return false;  // the client closed
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
    while (c.waiter == 0 && c.in_off < c.in.size()) {
      wire::Request r;
      size_t used = 0;
      std::string error;
      wire::Parse p = wire::parse_request(c.in.data() + c.in_off, c.in.size() - c.in_off, r, used, error);
      if (p == wire::Parse::kNeedMore) break;
      if (p == wire::Parse::kMalformed) {
        ++rejected_;
        close_connection(id);
        return;
      }
      c.in_off += used;
      handle(id, c, r);
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

void TCPStoreServer::handle(uint64_t id, Connection& c, wire::Request& r) {
  wire::Encoder e;
  const std::string& key = r.keys.empty() ? std::string() : r.keys[0];
  switch (r.command) {
    case Command::kSet:
      data_[key] = std::move(r.value);
      reply(c, e.u8(uint8_t(Status::kOk)));
      key_changed(key);
      return;
    case Command::kGet:
    case Command::kWait:
      if (has_all(r.keys)) {
        e.u8(uint8_t(Status::kOk));
        if (r.command == Command::kGet) e.bytes(data_.at(key));
        reply(c, e);
      } else {
        park(id, c, r);
      }
      return;
    case Command::kAdd: {
      int64_t value = r.delta;
      auto it = data_.find(key);
      if (it != data_.end()) {
        try {
          value += store_util::parse_counter("TCPStore", key, it->second);
        } catch (const Error& err) {
          reply(c, e.u8(uint8_t(Status::kError)).str(err.what()));
          return;
        }
      }
      data_[key] = store_util::format_counter(value);
      reply(c, e.u8(uint8_t(Status::kOk)).u64(static_cast<uint64_t>(value)));
      key_changed(key);
      return;
    }
    case Command::kCompareSet: {
      auto it = data_.find(key);
      bool absent = it == data_.end();
      if ((absent && r.value.empty()) || (!absent && it->second == r.value)) {
        data_[key] = r.desired;
        reply(c, e.u8(uint8_t(Status::kOk)).bytes(r.desired));
        key_changed(key);
      } else {
        reply(c, e.u8(uint8_t(Status::kOk)).bytes(absent ? r.value : it->second));
      }
      return;
    }
    case Command::kCheck:
      reply(c, e.u8(uint8_t(Status::kOk)).u8(has_all(r.keys) ? 1 : 0));
      return;
    case Command::kDelete:
      reply(c, e.u8(uint8_t(Status::kOk)).u8(data_.erase(key) > 0 ? 1 : 0));
      return;
    case Command::kNumKeys:
      reply(c, e.u8(uint8_t(Status::kOk)).u64(data_.size()));
      return;
  }
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
  w.command = r.command;
  w.keys = std::move(r.keys);
  // Cap at a day so that a huge timeout cannot overflow the clock.
  uint64_t ms = std::min<uint64_t>(r.timeout_ms, 86400000ull);
  w.deadline = Clock::now() + std::chrono::milliseconds(ms);
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
  for (uint64_t wid : ready) finish_waiter(wid, /*timed_out=*/false);
}

void TCPStoreServer::finish_waiter(uint64_t wid, bool timed_out) {
  auto w = waiters_.find(wid);
  if (w == waiters_.end()) return;
  Waiter waiter = w->second;
  drop_waiter(wid);
  auto ci = conns_.find(waiter.conn);
  if (ci == conns_.end()) return;
  Connection& c = ci->second;
  wire::Encoder e;
  if (!timed_out) {
    e.u8(uint8_t(Status::kOk));
    if (waiter.command == Command::kGet) e.bytes(data_.at(waiter.keys[0]));
  } else if (waiter.command == Command::kGet) {
    e.u8(uint8_t(Status::kTimeout));
  } else {
    std::vector<std::string> missing;
    for (const auto& k : waiter.keys) {
      if (data_.find(k) == data_.end()) missing.push_back(k);
    }
    e.u8(uint8_t(Status::kTimeout)).u32(static_cast<uint32_t>(missing.size()));
    for (const auto& k : missing) e.str(k);
  }
  reply(c, e);
  c.waiter = 0;
  // Send now, before the request that woke us is answered: its sender may be
  // rank 0, about to exit and take this server with it.
  flush(c);
  runnable_.push_back(waiter.conn);  // runs any requests queued behind the wait
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

void TCPStoreServer::expire_waiters() {
  auto now = Clock::now();
  std::vector<uint64_t> expired;
  for (const auto& [wid, w] : waiters_) {
    if (w.deadline <= now) expired.push_back(wid);
  }
  for (uint64_t wid : expired) finish_waiter(wid, /*timed_out=*/true);
}

int TCPStoreServer::poll_timeout_ms() const {
  if (!runnable_.empty()) return 0;
  if (waiters_.empty()) return -1;
  auto next = Clock::time_point::max();
  for (const auto& [wid, w] : waiters_) next = std::min(next, w.deadline);
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1 << 30));
}

void TCPStoreServer::close_connection(uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  if (it->second.waiter != 0) drop_waiter(it->second.waiter);
  ::close(it->second.fd);
  conns_.erase(it);
}

}  // namespace lockstep::distributed
