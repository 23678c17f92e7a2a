// tests/distributed/test_store.cpp — HashStore, FileStore, PrefixStore and
// TCPStore: the Store contract on each (set/get/add/compare_set/wait/check/
// delete/num_keys), blocking get satisfied by another thread or rank, add from
// many ranks, timeouts naming the missing key, the TCPStore server surviving
// malformed requests, and clear connect / lost-server errors.
// Read before: distributed/store/store.h, tests/support/multiprocess.h.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "distributed/store/file_store.h"
#include "distributed/store/hash_store.h"
#include "distributed/store/prefix_store.h"
#include "distributed/store/tcp_store.h"
#include "distributed/store/tcp_store_server.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using namespace std::chrono_literals;

namespace {

dist::Bytes b(const std::string& s) { return dist::Bytes(s.begin(), s.end()); }

// A fresh path under the temp directory, removed at scope exit.
struct TempPath {
  std::string path;
  TempPath() {
    static std::atomic<int> n{0};
    path = (std::filesystem::temp_directory_path() /
            ("lockstep_filestore_" + std::to_string(::getpid()) + "_" + std::to_string(n++)))
               .string();
    std::filesystem::remove(path);
  }
  ~TempPath() { std::filesystem::remove(path); }
};

// The Store contract, on any implementation (single caller).
void check_contract(dist::Store& s) {
  CHECK(s.num_keys() == 0);
  CHECK_FALSE(s.check({"a"}));
  s.set("a", std::string("alpha"));
  CHECK(s.get_string("a") == "alpha");
  CHECK(s.check({"a"}));
  s.set("a", b("beta"));  // overwrite
  CHECK(s.get_string("a") == "beta");

  CHECK(s.add("n", 5) == 5);
  CHECK(s.add("n", -2) == 3);
  CHECK(s.get_string("n") == "3");  // counters are decimal text

  // compare_set: absent + empty expected sets; mismatch leaves the value.
  CHECK(s.compare_set("c", {}, b("one")) == b("one"));
  CHECK(s.compare_set("c", b("zzz"), b("two")) == b("one"));
  CHECK(s.compare_set("c", b("one"), b("two")) == b("two"));
  CHECK(s.get_string("c") == "two");
  CHECK(s.compare_set("absent", b("x"), b("y")) == b("x"));
  CHECK_FALSE(s.check({"absent"}));

  CHECK(s.num_keys() == 3);
  CHECK(s.check({"a", "n", "c"}));
  CHECK_FALSE(s.check({"a", "nope"}));
  s.wait({"a", "n"}, 100ms);  // present: returns at once
  CHECK(s.delete_key("a"));
  CHECK_FALSE(s.delete_key("a"));
  CHECK(s.num_keys() == 2);
  CHECK_FALSE(s.check({"a"}));

  s.set("empty", dist::Bytes{});
  CHECK(s.get("empty").empty());
  CHECK_THROWS_WITH_AS(s.add("c", 1), doctest::Contains("c' holds 'two'"), ls::Error);  // "two" is not a counter
}

void check_wait_timeout(dist::Store& s) {
  s.set("here", std::string("1"));
  try {
    s.wait({"here", "missing_key"}, 150ms);
    FAIL("wait should have timed out");
  } catch (const ls::Error& e) {
    std::string msg = e.what();
    CHECK(msg.find("'missing_key'") != std::string::npos);
    CHECK(msg.find("'here'") == std::string::npos);  // only the missing ones are named
    CHECK(msg.find("150 ms") != std::string::npos);
  }
  s.set_timeout(100ms);
  CHECK_THROWS_WITH_AS(s.get("never"), doctest::Contains("'never'"), ls::Error);
}

}  // namespace

TEST_CASE("store: HashStore implements the Store contract") {
  dist::HashStore s;
  check_contract(s);
  check_wait_timeout(s);
}

TEST_CASE("store: FileStore implements the Store contract") {
  TempPath p;
  dist::FileStore s(p.path);
  check_contract(s);
  check_wait_timeout(s);
  dist::FileStore again(p.path);  // a second handle replays the same log
  CHECK(again.get_string("n") == "3");
  CHECK(again.num_keys() == s.num_keys());
}

TEST_CASE("store: TCPStore implements the Store contract") {
  dist::TCPStore s("127.0.0.1", 0, /*is_master=*/true, 5000ms);
  CHECK(s.is_master());
  CHECK(s.port() > 0);
  check_contract(s);
  check_wait_timeout(s);
  CHECK(s.get_string("here") == "1");  // still usable after the timeouts
}

TEST_CASE("store: PrefixStore namespaces keys of its base store") {
  auto base = std::make_shared<dist::HashStore>();
  dist::PrefixStore a("a", base), b2("b", base);
  a.set("k", std::string("from a"));
  b2.set("k", std::string("from b"));
  CHECK(a.get_string("k") == "from a");
  CHECK(b2.get_string("k") == "from b");
  CHECK(base->get_string("a/k") == "from a");
  CHECK(a.add("n", 2) == 2);
  CHECK_FALSE(b2.check({"n"}));
  CHECK(a.delete_key("k"));
  CHECK(b2.check({"k"}));
  a.set_timeout(100ms);
  CHECK_THROWS_WITH_AS(a.get("missing"), doctest::Contains("'a/missing'"), ls::Error);

  check_contract(*std::make_shared<dist::PrefixStore>("p", std::make_shared<dist::HashStore>()));
}

TEST_CASE("store: a blocking get is satisfied by another thread") {
  dist::HashStore hs;
  dist::TCPStore master("127.0.0.1", 0, true, 5000ms);
  dist::TCPStore client("127.0.0.1", master.port(), false, 5000ms);
  std::thread setter([&] {
    std::this_thread::sleep_for(50ms);
    hs.set("late", std::string("hash"));
    client.set("late", std::string("tcp"));
  });
  CHECK(hs.get_string("late") == "hash");
  CHECK(master.get_string("late") == "tcp");
  setter.join();
}

TEST_CASE("store: TCPStore across processes: blocking get, add from every rank, one compare_set winner") {
  ls::testing::run_ranks(4, [](int rank) {
    int port = std::stoi(std::getenv("MASTER_PORT"));
    dist::TCPStore s("127.0.0.1", port, /*is_master=*/rank == 0, 10000ms);
    // Rank 3 publishes late; everyone else blocks in get until it does.
    if (rank == 3) {
      std::this_thread::sleep_for(100ms);
      s.set("from3", std::string("hello"));
    }
    CHECK(s.get_string("from3") == "hello");
    for (int i = 0; i < 25; ++i) s.add("counter", 1);
    // Exactly one rank installs its claim; all see the same winner.
    dist::Bytes now = s.compare_set("leader", {}, b(std::to_string(rank)));
    s.add("arrived", 1);
    s.set("done/" + std::to_string(rank), std::string("1"));
    s.wait({"done/0", "done/1", "done/2", "done/3"});
    CHECK(s.get_string("counter") == "100");
    CHECK(s.get("leader") == now);
    // Rank 0 hosts the server: it leaves only after everyone has read.
    if (s.add("read", 1) == 4) s.set("all_read", std::string("1"));
    if (rank == 0) s.wait({"all_read"});
  });
}

TEST_CASE("store: FileStore across processes: add from every rank and blocking get") {
  TempPath p;
  std::string path = p.path;
  dist::FileStore create(path);
  ls::testing::run_ranks(3, [path](int rank) {
    dist::FileStore s(path);
    s.set_timeout(10000ms);
    for (int i = 0; i < 20; ++i) s.add("counter", 1);
    s.set("rank/" + std::to_string(rank), std::to_string(rank * 10));
    s.wait({"rank/0", "rank/1", "rank/2"}, 10000ms);
    CHECK(s.get_string("rank/" + std::to_string((rank + 1) % 3)) == std::to_string(((rank + 1) % 3) * 10));
    s.add("finished", 1);
  });
  CHECK(create.get_string("counter") == "60");
  CHECK(create.get_string("finished") == "3");
}

TEST_CASE("store: TCPStore server survives garbage and oversized requests from a raw socket") {
  dist::TCPStore s("127.0.0.1", 0, true, 5000ms);
  s.set("before", std::string("ok"));
  auto connect_raw = [&] {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(s.port()));
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    return fd;
  };
  auto raw_exchange = [&](const dist::Bytes& bytes) {
    int fd = connect_raw();
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    char c;
    ssize_t n = ::recv(fd, &c, 1, 0);  // the server closes: 0 (EOF) or ECONNRESET
    ::close(fd);
    return n;
  };
  // Every connection opens with VALIDATE + the magic number (Note [TCPStore protocol]).
  auto validated = [](dist::Bytes rest) {
    dist::Bytes v;
    v.reserve(5 + rest.size());
    for (uint8_t x : {0x00, 0xce, 0xf7, 0x85, 0x3c}) v.push_back(x);
    v.insert(v.end(), rest.begin(), rest.end());
    return v;
  };
  const uint8_t ff = 0xff;
  CHECK(raw_exchange(b("GET / HTTP/1.0\r\n\r\n")) <= 0);                  // unknown query type 'G'
  CHECK(raw_exchange(validated({1, ff, ff, ff, ff, ff, ff, ff, ff, 'k'})) <= 0);  // SET with a 2^64 B key
  CHECK(raw_exchange(validated({1, 1, 0, 0, 0, 0, 0, 0, 0, 'k', 0, 0, 0, 0x10, 0, 0, 0, 0})) <= 0);  // 256 MiB value
  CHECK(raw_exchange(validated({6, ff, ff, ff, 0x7f, 0, 0, 0, 0})) <= 0);         // WAIT with 2^31 keys
  CHECK(raw_exchange({13, 1, 2, 3, 4}) <= 0);                                      // PING before VALIDATE
  CHECK(raw_exchange({0, 1, 2, 3, 4, 13, 1, 2, 3, 4}) <= 0);                       // a wrong magic number
  CHECK(raw_exchange(validated({17})) <= 0);                                       // LIST_KEYS: not served
  CHECK(s.server()->rejected_connections() == 7);
  {  // a client that sends half a request and leaves
    int fd = connect_raw();
    uint8_t half[] = {0, 0xce, 0xf7, 0x85, 0x3c, 1, 5, 0, 0, 0, 0, 0, 0, 0, 'k', 'e'};
    ::send(fd, half, sizeof(half), MSG_NOSIGNAL);
    ::close(fd);
  }
  {  // a PyTorch-style client: SET (no reply) and close at once; the SET still runs
    int fd = connect_raw();
    const dist::Bytes set = validated({1, 3, 0, 0, 0, 0, 0, 0, 0, '/', 'b', 'y', 1, 0, 0, 0, 0, 0, 0, 0, '!'});
    ::send(fd, set.data(), set.size(), MSG_NOSIGNAL);
    ::close(fd);
  }
  CHECK(s.get_string("by") == "!");
  CHECK(s.delete_key("by"));
  // The server still serves the old connection and new ones.
  CHECK(s.get_string("before") == "ok");
  dist::TCPStore other("127.0.0.1", s.port(), false, 5000ms);
  other.set("after", std::string("fine"));
  CHECK(s.get_string("after") == "fine");
  CHECK(s.num_keys() == 2);
}

TEST_CASE("store: TCPStore reports an ADD on a non-counter key and carries on") {
  // The protocol has no error reply: the server drops the connection, the
  // client reconnects and reads the value to name it.
  dist::TCPStore s("127.0.0.1", 0, true, 5000ms);
  s.set("text", std::string("hello"));
  CHECK_THROWS_WITH_AS(s.add("text", 1), doctest::Contains("'text' holds 'hello'"), ls::Error);
  CHECK(s.add("count", 2) == 2);
}

TEST_CASE("store: TCPStore client without a server times out naming host:port and MASTER_ADDR") {
  int port = ls::testing::free_port();
  try {
    dist::TCPStore s("127.0.0.1", port, /*is_master=*/false, 300ms);
    FAIL("connecting should have failed");
  } catch (const ls::Error& e) {
    std::string msg = e.what();
    CHECK(msg.find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
    CHECK(msg.find("MASTER_ADDR") != std::string::npos);
    CHECK(msg.find("MASTER_PORT") != std::string::npos);
  }
}

TEST_CASE("store: a TCPStore get blocked on a server that goes away fails with a clear message") {
  auto master = std::make_unique<dist::TCPStore>("127.0.0.1", 0, true, 5000ms);
  dist::TCPStore client("127.0.0.1", master->port(), false, 5000ms);
  std::thread killer([&] {
    std::this_thread::sleep_for(100ms);
    master.reset();
  });
  CHECK_THROWS_WITH_AS(client.get("never"), doctest::Contains("rank 0"), ls::Error);
  killer.join();
}

TEST_CASE("store: the TCPStore parser waits for whole requests and rejects bad lengths") {
  namespace wire = dist::wire;
  wire::Encoder e;
  e.u8(uint8_t(wire::Command::kCompareSet)).str("key").bytes(b("old")).bytes(b("new"));
  wire::Request r;
  size_t used = 0;
  std::string error;
  for (size_t n = 0; n < e.buf.size(); ++n) {
    CHECK(wire::parse_request(e.buf.data(), n, r, used, error) == wire::Parse::kNeedMore);
  }
  dist::Bytes two = e.buf;
  two.insert(two.end(), e.buf.begin(), e.buf.end());
  REQUIRE(wire::parse_request(two.data(), two.size(), r, used, error) == wire::Parse::kOk);
  CHECK(used == e.buf.size());
  CHECK(r.command == wire::Command::kCompareSet);
  CHECK(r.keys.at(0) == "key");
  CHECK(r.value == b("old"));
  CHECK(r.desired == b("new"));

  dist::Bytes big = {uint8_t(wire::Command::kGet), 0x01, 0x00, 0x10, 0x00, 0, 0, 0, 0};  // 1 MiB + 1 key
  CHECK(wire::parse_request(big.data(), big.size(), r, used, error) == wire::Parse::kMalformed);
  CHECK(error.find("key") != std::string::npos);
  dist::Bytes queue = {14};
  CHECK(wire::parse_request(queue.data(), queue.size(), r, used, error) == wire::Parse::kMalformed);
  CHECK(error.find("queue_push") != std::string::npos);
  dist::Bytes junk = {'G'};
  CHECK(wire::parse_request(junk.data(), junk.size(), r, used, error) == wire::Parse::kMalformed);
}

TEST_CASE("store: the TCPStore wire bytes are PyTorch's (validate, ping, set with the '/' key prefix)") {
  // The bytes a torch.distributed.TCPStore client sends (checked against
  // PyTorch 2.15 with a dumping server): VALIDATE + magic, PING + nonce, then
  // SET of key 'ab' as '/ab' with value 'xyz', lengths as u64.
  namespace wire = dist::wire;
  const dist::Bytes torch = {0x00, 0xce, 0xf7, 0x85, 0x3c, 0x0d, 0x90, 0x09, 0x00, 0x00, 0x01, 0x03, 0, 0, 0, 0, 0,
                             0,    0,    '/',  'a',  'b',  0x03, 0,    0,    0,    0,    0,    0,    0, 'x', 'y', 'z'};
  wire::Request r;
  size_t used = 0, off = 0;
  std::string error;
  REQUIRE(wire::parse_request(torch.data(), torch.size(), r, used, error) == wire::Parse::kOk);
  CHECK(r.command == wire::Command::kValidate);
  CHECK(r.word == wire::kValidationMagic);
  off += used;
  REQUIRE(wire::parse_request(torch.data() + off, torch.size() - off, r, used, error) == wire::Parse::kOk);
  CHECK(r.command == wire::Command::kPing);
  CHECK(r.word == 0x990);
  off += used;
  REQUIRE(wire::parse_request(torch.data() + off, torch.size() - off, r, used, error) == wire::Parse::kOk);
  CHECK(r.command == wire::Command::kSet);
  CHECK(r.keys.at(0) == "/ab");
  CHECK(r.value == b("xyz"));
  CHECK(off + used == torch.size());
}

TEST_CASE("store: a TCPStore wait that times out is cancelled and the connection stays usable") {
  dist::TCPStore s("127.0.0.1", 0, true, 5000ms);
  s.set("here", std::string("1"));
  CHECK_THROWS_WITH_AS(s.wait({"here", "absent"}, 100ms), doctest::Contains("'absent'"), ls::Error);
  try {
    s.wait({"here", "absent"}, 50ms);
  } catch (const ls::Error& e) {
    CHECK(std::string(e.what()).find("'here'") == std::string::npos);  // only the missing key is named
  }
  CHECK(s.get_string("here") == "1");
  s.set("absent", std::string("2"));
  s.wait({"here", "absent"}, 1000ms);
  CHECK(s.num_keys() == 2);
  CHECK(s.delete_key("here"));
  CHECK(!s.delete_key("here"));
}
