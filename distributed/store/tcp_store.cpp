// distributed/store/tcp_store.cpp — the TCPStore client: connect with backoff, the
// validate + ping handshake, then PyTorch's requests (Note [TCPStore protocol]).
// Read before: distributed/store/tcp_store.h.
#include "distributed/store/tcp_store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "distributed/store/store_util.h"
#include "distributed/store/tcp_store_server.h"

namespace lockstep::distributed {

using wire::Command;

namespace {

// How long a cancel_wait, or the checks naming missing keys, may take past a wait's timeout.
constexpr auto kServerGrace = std::chrono::seconds(5);
// § Note [Waiting for the store]
// After this long without a connection, connect() prints one "waiting for rank 0 at HOST:PORT (timeout N s)" line on stderr (a
// notice, not an error: the wait goes on until the timeout).
constexpr auto kWaitNotice = std::chrono::seconds(3);
// A connected service silent this long at the handshake gets one line on stderr the same way.
constexpr auto kHandshakeNotice = std::chrono::milliseconds(2000);

int remaining_ms(std::chrono::steady_clock::time_point deadline) {
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1 << 30));
}

// One non-blocking connect attempt bounded by `deadline`; returns the fd or -1 (errno set).
int try_connect(const addrinfo* ai, std::chrono::steady_clock::time_point deadline) {
  int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) return -1;
  if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      int err = errno;
      ::close(fd);
      errno = err;
      return -1;
    }
    pollfd p{fd, POLLOUT, 0};
    int n;
    do {
      n = ::poll(&p, 1, std::min(remaining_ms(deadline), 1000));
    } while (n < 0 && errno == EINTR);
    int err = 0;
    socklen_t len = sizeof(err);
    if (n <= 0) err = ETIMEDOUT;
    else ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      ::close(fd);
      errno = err;
      return -1;
    }
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

TCPStore::TCPStore(std::string host, int port, bool is_master, std::chrono::milliseconds timeout)
    : host_(std::move(host)), port_(port) {
  LS_CHECK(port >= 0 && port <= 65535, "TCPStore: port ", port, " is out of range [0, 65535]; check MASTER_PORT");
  LS_CHECK(is_master || port != 0, "TCPStore: port 0 means 'any free port' and only works for the master; "
           "the other ranks need the real port (MASTER_PORT)");
  timeout_ = timeout;
  if (is_master) {
    server_ = std::make_unique<TCPStoreServer>(port);
    port_ = server_->port();
  }
  connect(timeout);
}

TCPStore::~TCPStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();  // stops the server thread; other ranks' connections drop
}

std::string TCPStore::where() const { return detail::str(host_, ":", port_); }

void TCPStore::connect(std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string port = std::to_string(port_);
  int rc = ::getaddrinfo(host_.c_str(), port.c_str(), &hints, &res);
  LS_CHECK(rc == 0, "TCPStore: cannot resolve host '", host_, "': ", ::gai_strerror(rc),
           "; check MASTER_ADDR (rank 0's address, e.g. 127.0.0.1 on one machine)");
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  auto backoff = std::chrono::milliseconds(10);
  int last_error = 0;
  int attempts = 0;
  bool told = false;
  for (;;) {
    ++attempts;
    for (addrinfo* ai = res; ai != nullptr && fd_ < 0; ai = ai->ai_next) {
      fd_ = try_connect(ai, deadline);
      if (fd_ < 0) last_error = errno;
    }
    if (fd_ >= 0) break;
    auto now = Clock::now();
    if (now >= deadline) break;
    if (!told && now - start >= kWaitNotice) {
      // Note [Waiting for the store]: one line, so a wrong MASTER_ADDR or a rank 0
      // that never started is not a silent wait of the whole timeout.
      told = true;
      std::fprintf(stderr, "lockstep: waiting for rank 0 at %s (timeout %lld s): no store answers there yet (%s)\n",
                   where().c_str(), static_cast<long long>(std::chrono::ceil<std::chrono::seconds>(timeout).count()),
                   std::strerror(last_error));
      std::fflush(stderr);
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(250));
  }
  ::freeaddrinfo(res);
  LS_CHECK(fd_ >= 0, "TCPStore: could not connect to the store server at ", where(), " within ",
           timeout.count(), " ms (", attempts, " attempts, last error: ", std::strerror(last_error),
           "). Is rank 0 running? Check MASTER_ADDR and MASTER_PORT: they must name rank 0's host "
           "and the port it listens on, the same on every rank");
  // A TCPStore answers the handshake at once; a silent port is not one.
  handshake(Clock::now() + std::clamp<Clock::duration>(timeout, std::chrono::seconds(2), std::chrono::seconds(30)));
}

[[noreturn]] void TCPStore::fail(const std::string& what) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;  // the next call reconnects
  throw Error(detail::str("TCPStore::", wire::command_name(current_), ": ", what, " (server ", where(), ")"));
}

namespace {
std::string foreign_service(const std::string& where, const std::string& saw) {
  return detail::str("TCPStore: ", saw, ": what listens at ", where,
                     " is not a lockstep (or PyTorch) TCPStore (a web server or another program?). Choose a "
                     "free port for MASTER_PORT (lockstep-run --master-port)");
}
}  // namespace

void TCPStore::handshake(Clock::time_point deadline) {
  // Note [TCPStore protocol]: VALIDATE with the magic number, then a PING whose
  // nonce the server must echo; anything else is not a TCPStore.
  static std::atomic<uint32_t> counter{0};
  nonce_ = static_cast<uint32_t>(::getpid()) * 2654435761u + counter++;
  wire::Encoder e;
  e.u8(uint8_t(Command::kValidate)).u32(wire::kValidationMagic).u8(uint8_t(Command::kPing)).u32(nonce_);
  uint8_t want[4];
  for (int i = 0; i < 4; ++i) want[i] = static_cast<uint8_t>(nonce_ >> (8 * i));
  std::string saw;
  try {
    send_request(Command::kValidate, e, deadline);
    // A TCPStore answers at once. A silent service is most likely not one: say so now, not
    // only when the handshake's deadline passes (the wait goes on until then).
    pollfd answer{fd_, POLLIN, 0};
    int ready;
    do {
      ready = ::poll(&answer, 1, std::min(remaining_ms(deadline), static_cast<int>(kHandshakeNotice.count())));
    } while (ready < 0 && errno == EINTR);
    if (ready == 0 && remaining_ms(deadline) > 0) {
      std::fprintf(stderr, "lockstep: the service at %s accepted the connection but has not answered the store "
                   "handshake for %lld s; if it is not rank 0's store (another program on MASTER_PORT?), choose "
                   "another port. Waiting up to %d s more\n", where().c_str(),
                   static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(kHandshakeNotice).count()),
                   remaining_ms(deadline) / 1000);
      std::fflush(stderr);
    }
    for (int i = 0; i < 4 && saw.empty(); ++i) {
      uint8_t got = read_u8(deadline);
      if (got == want[i]) continue;
      const bool printable = got >= 0x20 && got < 0x7f;
      saw = detail::str("the handshake was answered with byte ", int(got),
                        printable ? std::string(" ('") + char(got) + "')" : std::string(), ", which no TCPStore sends");
    }
  } catch (const Error&) {
    saw = closed_by_server_ ? "the service closed the connection at the handshake (validate + ping)"
                            : "no answer to the handshake (validate + ping) in time";
  }
  if (saw.empty()) return;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  throw Error(foreign_service(where(), saw));
}

void TCPStore::send_request(Command cmd, const wire::Encoder& request, Clock::time_point deadline) {
  current_ = cmd;
  closed_by_server_ = false;
  if (fd_ < 0) connect(timeout_);
  current_ = cmd;
  size_t off = 0;
  const Bytes& b = request.buf;
  while (off < b.size()) {
    ssize_t n = ::send(fd_, b.data() + off, b.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, remaining_ms(deadline)) == 0) fail("timed out sending the request");
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) closed_by_server_ = true;
    fail(detail::str("lost the connection to the server (", std::strerror(errno),
                     "); rank 0, which hosts the store, may have exited or crashed"));
  }
}

void TCPStore::read_exact(uint8_t* p, size_t n, Clock::time_point deadline) {
  size_t got = 0;
  while (got < n) {
    ssize_t k = ::recv(fd_, p + got, n - got, 0);
    if (k > 0) {
      got += static_cast<size_t>(k);
      continue;
    }
    if (k == 0) {
      closed_by_server_ = true;
      fail("the server closed the connection; rank 0, which hosts the store, may have exited or crashed");
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      if (errno == ECONNRESET) closed_by_server_ = true;
      fail(detail::str("lost the connection to the server: ", std::strerror(errno)));
    }
    pollfd pf{fd_, POLLIN, 0};
    int r;
    do {
      r = ::poll(&pf, 1, remaining_ms(deadline));
    } while (r < 0 && errno == EINTR);
    if (r == 0) fail("no reply from the server before the deadline; is rank 0 alive?");
  }
}

uint8_t TCPStore::read_u8(Clock::time_point deadline) {
  uint8_t v;
  read_exact(&v, 1, deadline);
  return v;
}

uint32_t TCPStore::read_u32(Clock::time_point deadline) {
  uint8_t b[4];
  read_exact(b, 4, deadline);
  return wire::Decoder(b, 4).u32();
}

uint64_t TCPStore::read_u64(Clock::time_point deadline) {
  uint8_t b[8];
  read_exact(b, 8, deadline);
  return wire::Decoder(b, 8).u64();
}

Bytes TCPStore::read_bytes(Clock::time_point deadline) {
  uint64_t n = read_u64(deadline);
  if (n > wire::kMaxValueBytes) fail(detail::str("reply claims ", n, " bytes, over the 64 MiB limit"));
  Bytes out(n);
  read_exact(out.data(), n, deadline);
  return out;
}

void TCPStore::ping(Clock::time_point deadline) {
  const uint32_t got = read_u32(deadline);
  if (got != nonce_) fail(detail::str("the server echoed ping ", got, " for ", nonce_, "; the connection is out of step"));
}

bool TCPStore::wait_prefixed(const std::vector<std::string>& keys, Clock::time_point deadline) {
  wire::Encoder e;
  e.u8(uint8_t(Command::kWait)).u64(keys.size());
  for (const auto& k : keys) e.str(k);
  send_request(current_, e, deadline);
  pollfd pf{fd_, POLLIN, 0};
  int r;
  do {
    r = ::poll(&pf, 1, remaining_ms(deadline));
  } while (r < 0 && errno == EINTR);
  const auto grace = Clock::now() + kServerGrace;
  if (r != 0) {
    if (read_u8(grace) != wire::kWaitStopWaiting) fail("bad reply to wait (expected STOP_WAITING)");
    return true;
  }
  // Our timeout passed: cancel; the keys may still have arrived just before.
  send_request(current_, wire::Encoder().u8(uint8_t(Command::kCancelWait)), grace);
  uint8_t answer = read_u8(grace);
  const bool arrived = answer == wire::kWaitStopWaiting;
  if (arrived) answer = read_u8(grace);
  if (answer != wire::kWaitCanceled) fail("bad reply to cancel_wait (expected WAIT_CANCELED)");
  return arrived;
}

// ---- the Store interface ----------------------------------------------------

namespace {
const std::string kKeyPrefix = "/";  // Note [TCPStore protocol]: PyTorch's client prefix
std::string prefixed(const std::string& key) { return kKeyPrefix + key; }

void check_key(const char* op, const std::string& key) {
  LS_CHECK(key.size() + kKeyPrefix.size() <= wire::kMaxKeyBytes, "TCPStore::", op, ": key of ", key.size(),
           " bytes exceeds the limit of ", wire::kMaxKeyBytes - kKeyPrefix.size());
}
void check_value(const char* op, const std::string& key, const Bytes& v) {
  LS_CHECK(v.size() <= wire::kMaxValueBytes, "TCPStore::", op, ": value of key '", key.substr(0, 64),
           "' has ", v.size(), " bytes, over the limit of ", wire::kMaxValueBytes, " (64 MiB)");
}
void check_keys(const char* op, const std::vector<std::string>& keys) {
  LS_CHECK(keys.size() <= wire::kMaxKeysPerRequest, "TCPStore::", op, ": ", keys.size(),
           " keys in one call exceed the limit of ", wire::kMaxKeysPerRequest);
  for (const auto& k : keys) check_key(op, k);
}
}  // namespace

void TCPStore::set(const std::string& key, const Bytes& value) {
  check_key("set", key);
  check_value("set", key, value);
  std::lock_guard<std::mutex> lock(mutex_);
  wire::Encoder e;
  // SET has no reply; the PING after it returns once the server has run the SET.
  e.u8(uint8_t(Command::kSet)).str(prefixed(key)).bytes(value).u8(uint8_t(Command::kPing)).u32(nonce_);
  auto deadline = Clock::now() + timeout_;
  send_request(Command::kSet, e, deadline);
  ping(deadline);
}

Bytes TCPStore::get(const std::string& key) {
  check_key("get", key);
  std::lock_guard<std::mutex> lock(mutex_);
  current_ = Command::kGet;
  if (!wait_prefixed({prefixed(key)}, Clock::now() + timeout_)) {
    store_util::throw_timeout("TCPStore", "get", timeout_, {key});
  }
  wire::Encoder e;
  e.u8(uint8_t(Command::kGet)).str(prefixed(key));
  auto deadline = Clock::now() + timeout_;
  send_request(Command::kGet, e, deadline);
  return read_bytes(deadline);
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  check_key("add", key);
  std::lock_guard<std::mutex> lock(mutex_);
  wire::Encoder e;
  e.u8(uint8_t(Command::kAdd)).str(prefixed(key)).u64(static_cast<uint64_t>(delta));
  auto deadline = Clock::now() + timeout_;
  try {
    send_request(Command::kAdd, e, deadline);
    return static_cast<int64_t>(read_u64(deadline));
  } catch (const Error&) {
    if (!closed_by_server_) throw;
    // The protocol has no error reply: a server closes the connection on an ADD
    // to a value that is not an integer. Reconnect and read the value to say so.
    std::exception_ptr original = std::current_exception();
    Bytes value;
    try {
      wire::Encoder q;
      q.u8(uint8_t(Command::kCheck)).u64(1).str(prefixed(key));
      send_request(Command::kAdd, q, deadline);
      if (read_u8(deadline) != wire::kCheckReady) std::rethrow_exception(original);
      send_request(Command::kAdd, wire::Encoder().u8(uint8_t(Command::kGet)).str(prefixed(key)), deadline);
      value = read_bytes(deadline);
    } catch (const Error&) {
      std::rethrow_exception(original);
    }
    store_util::parse_counter("TCPStore", key, value);  // throws naming the key and its value
    std::rethrow_exception(original);
  }
}

Bytes TCPStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  check_key("compare_set", key);
  check_value("compare_set", key, expected);
  check_value("compare_set", key, desired);
  std::lock_guard<std::mutex> lock(mutex_);
  wire::Encoder e;
  e.u8(uint8_t(Command::kCompareSet)).str(prefixed(key)).bytes(expected).bytes(desired);
  auto deadline = Clock::now() + timeout_;
  send_request(Command::kCompareSet, e, deadline);
  return read_bytes(deadline);
}

void TCPStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  check_keys("wait", keys);
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> full;
  for (const auto& k : keys) full.push_back(prefixed(k));
  current_ = Command::kWait;
  if (wait_prefixed(full, Clock::now() + std::max(timeout, std::chrono::milliseconds(0)))) return;
  // Name the missing keys: one CHECK per key, sent together.
  wire::Encoder e;
  for (const auto& k : full) e.u8(uint8_t(Command::kCheck)).u64(1).str(k);
  auto deadline = Clock::now() + kServerGrace;
  send_request(Command::kWait, e, deadline);
  std::vector<std::string> missing;
  for (const auto& k : keys) {
    if (read_u8(deadline) != wire::kCheckReady) missing.push_back(k);
  }
  store_util::throw_timeout("TCPStore", "wait", timeout, missing);
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  check_keys("check", keys);
  std::lock_guard<std::mutex> lock(mutex_);
  wire::Encoder e;
  e.u8(uint8_t(Command::kCheck)).u64(keys.size());
  for (const auto& k : keys) e.str(prefixed(k));
  auto deadline = Clock::now() + timeout_;
  send_request(Command::kCheck, e, deadline);
  return read_u8(deadline) == wire::kCheckReady;
}

bool TCPStore::delete_key(const std::string& key) {
  check_key("delete_key", key);
  std::lock_guard<std::mutex> lock(mutex_);
  wire::Encoder e;
  e.u8(uint8_t(Command::kDelete)).str(prefixed(key));
  auto deadline = Clock::now() + timeout_;
  send_request(Command::kDelete, e, deadline);
  return read_u64(deadline) == 1;
}

int64_t TCPStore::num_keys() {
  std::lock_guard<std::mutex> lock(mutex_);
  wire::Encoder e;
  e.u8(uint8_t(Command::kNumKeys));
  auto deadline = Clock::now() + timeout_;
  send_request(Command::kNumKeys, e, deadline);
  return static_cast<int64_t>(read_u64(deadline));
}

}  // namespace lockstep::distributed
