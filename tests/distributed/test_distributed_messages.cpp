// tests/distributed/test_distributed_messages.cpp — what a user reads when the
// distributed setup is wrong: DDP constructed on one rank only (Note [DDP
// construction check]) names the rank that did not join; a service that is not
// a lockstep store on MASTER_PORT is called that, not "bad reply status 72"; and
// the progress board says something when no rank is behind (Note [Progress
// board when no rank is behind]). The "waiting for rank 0" line is checked on a
// program: tests/examples/check_cli.sh bench_allreduce.
// Read before: distributed/ddp/distributed_data_parallel.cpp, distributed/store/tcp_store.cpp,
// distributed/ddp/ddp_progress.h.
#include <doctest/doctest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "distributed/ddp/ddp_progress.h"
#include "distributed/distributed.h"
#include "distributed/store/tcp_store.h"
#include "tests/distributed/ddp_test_models.h"
#include "tests/support/errors.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using namespace std::chrono_literals;
using lockstep::testing::contains;

TEST_CASE("ddp: constructed on rank 0 only, the construction check names the rank that did not join") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo", dist::InitOptions().timeout(2s));
    std::string error;
    if (rank == 0) {
      ls::manual_seed(0);
      try {
        dist::DistributedDataParallel ddp(std::make_shared<ls::testing::BranchyMLP>(), pg);
      } catch (const ls::Error& e) {
        error = e.what();
      }
      CHECK_MESSAGE(contains(error, "the construction check"), error);
      CHECK_MESSAGE(contains(error, "rank 1 (1 of 2) did not construct DistributedDataParallel"), error);
      CHECK_MESSAGE(contains(error, "did not complete within 2000 ms"), error);
    }
    // Leave together: rank 0 hosts the store.
    dist::barrier_on_store(*pg->store(), rank, 2, 20s, "test/leave");
  }, 60s);
}

namespace {

// A TCP service on a free loopback port that answers every connection like a
// web server refusing a request; stops when destroyed.
class FakeHttpServer {
 public:
  FakeHttpServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(::listen(fd_, 4) == 0);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      while (!stop_) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        char buf[256];
        (void)!::read(c, buf, sizeof(buf));
        const char reply[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
        (void)!::write(c, reply, sizeof(reply) - 1);
        ::close(c);
      }
    });
  }
  ~FakeHttpServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

TEST_CASE("tcp store: a web server on MASTER_PORT is reported as not a lockstep store") {
  FakeHttpServer http;
  const std::string error =
      ls::testing::error_of([&] { dist::TCPStore store("127.0.0.1", http.port(), /*is_master=*/false, 5s); });
  CHECK_MESSAGE(contains(error, "answered with byte 72 ('H')"), error);
  CHECK_MESSAGE(contains(error, "is not a lockstep (or PyTorch) TCPStore"), error);
  CHECK_MESSAGE(contains(error, "MASTER_PORT"), error);
  CHECK_MESSAGE(!contains(error, "bad reply status"), error);
}

TEST_CASE("ddp progress board: a rank level with or past the waiting one is named, not left out") {
  // Rank 1 published the launch of the bucket rank 0 waits for, then stopped
  // (its data never left): it is not behind, yet it is the one to look at;
  // unless it gave up waiting there too (a healthy co-waiter), then it is not.
  // Likewise when it published a later position before its last send left.
  ls::testing::run_ranks(2, [](int rank) {
    dist::RendezvousInfo info = dist::rendezvous_from_env(dist::InitOptions().timeout(20s));
    dist::detail::ProgressBoard board(info.store, rank, 2);  // the same instance number in both ranks
    const dist::detail::DDPPosition waiting{3, 2, 2, false};
    // Rank 0 polls: rank 1's writer thread publishes in the background.
    auto poll_until = [&](const std::string& part) {
      std::string note;
      for (int i = 0; i < 100 && !contains(note, part); ++i) {
        note = board.who_is_behind(waiting);
        std::this_thread::sleep_for(10ms);
      }
      return note;
    };
    // Rank 1 waits without blocking calls: a blocking wait would hold the store
    // connection its board's writer thread needs.
    auto await_key = [&](const std::string& key) {
      for (int i = 0; i < 2000 && !info.store->check({key}); ++i) std::this_thread::sleep_for(10ms);
    };
    if (rank == 1) {
      board.record(waiting);
      await_key("test/level_checked");
      board.record({3, 2, 2, false, /*gave_up=*/true});  // a healthy rank waiting there too
      await_key("test/gave_up_checked");
      board.record({3, 2, 2, true});  // finished this backward, stopped before its send left
      await_key("test/ahead_checked");
      board.record({3, 1, 2, false});  // now behind: the usual line
      await_key("test/behind_checked");
    } else {
      std::string note = poll_until("rank 1 reached this point");
      CHECK_MESSAGE(contains(note, "Progress board: no rank is behind; rank 1 reached this point too ('backward #3, "
                                   "2 of 2 buckets launched') but neither completed the collective nor gave up "
                                   "waiting on it"), note);
      info.store->set("test/level_checked", std::string("1"));
      note = poll_until("gave up waiting as well");
      CHECK_MESSAGE(contains(note, "Progress board: no rank is behind; rank 1 reached this point ('backward #3, 2 of 2 "
                                   "buckets launched') or later and gave up waiting as well"), note);
      info.store->set("test/gave_up_checked", std::string("1"));
      note = poll_until("got past this point");
      CHECK_MESSAGE(contains(note, "Progress board: no rank is behind; rank 1 got past this point ('backward #3, 2 of 2 "
                                   "buckets launched': rank 1 at 'finished backward #3') but its last data for this "
                                   "collective never arrived"), note);
      info.store->set("test/ahead_checked", std::string("1"));
      note = poll_until("did not arrive");
      CHECK_MESSAGE(contains(note, "Progress board: rank 1 did not arrive: its last position is 'backward #3, 1 of 2 "
                                   "buckets launched'"), note);
      info.store->set("test/behind_checked", std::string("1"));
    }
    dist::barrier_on_store(*info.store, rank, 2, 20s, "test/leave");
  }, 60s);
}
