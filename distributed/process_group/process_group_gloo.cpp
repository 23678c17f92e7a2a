// distributed/process_group/process_group_gloo.cpp — the Gloo backend: store adapter, device
// selection, the worker queue and failure handling. The collectives themselves
// (what each one runs) are in process_group_gloo_collectives.cpp.
// Read before: distributed/process_group/process_group_gloo.h. Read next:
// process_group_gloo_collectives.cpp.
#include "distributed/process_group/process_group_gloo.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include "core/env_flag.h"
#include "core/factory.h"
#include "distributed/process_group/collective_check.h"
#include "distributed/process_group/process_group_gloo_fingerprints.h"
#include "distributed/process_group/process_group_gloo_pending.h"
#include "distributed/process_group/process_group_gloo_teardown.h"
#include "distributed/process_group/reduce_kernels.h"
#include "distributed/process_group/shm/shm_channel.h"
#include "distributed/process_group/work_queue.h"

namespace lockstep::distributed {
namespace {

using detail::CollectiveKind;
using detail::check_scatter_inputs;
using detail::prepare_gather_outputs;

// Gloo's rendezvous talks to a gloo::rendezvous::Store; this forwards to ours,
// under a prefix so several groups can share one store.
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(std::shared_ptr<distributed::Store> store, std::string prefix,
                   std::chrono::milliseconds timeout)
      : store_(std::move(store)), prefix_(std::move(prefix)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(prefix_ + key, Bytes(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    store_->wait({prefix_ + key}, timeout_);
    Bytes b = store_->get(prefix_ + key);
    return std::vector<char>(b.begin(), b.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    for (const auto& k : keys) prefixed.push_back(prefix_ + k);
    store_->wait(prefixed, timeout);
  }

 private:
  std::shared_ptr<distributed::Store> store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

bool is_loopback(const std::string& host) {
  return host.rfind("127.", 0) == 0 || host == "localhost" || host == "::1";
}

// The local IPv4/IPv6 address the kernel would use to reach `host`: "connect" a
// UDP socket (sends nothing) and read its local address.
std::string local_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), "9", &hints, &res);
  LS_CHECK(rc == 0, "ProcessGroupGloo: cannot resolve MASTER_ADDR '", host, "': ", gai_strerror(rc),
           "; set MASTER_ADDR to a reachable address or LOCKSTEP_SOCKET_IFNAME to an interface");
  std::string out;
  for (addrinfo* ai = res; ai != nullptr && out.empty(); ai = ai->ai_next) {
    int fd = socket(ai->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET6_ADDRSTRLEN] = {0};
      const void* addr = local.ss_family == AF_INET
                             ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
                             : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
      if (inet_ntop(local.ss_family, addr, buf, sizeof(buf)) != nullptr) out = buf;
    }
    close(fd);
  }
  freeaddrinfo(res);
  LS_CHECK(!out.empty(), "ProcessGroupGloo: no route from this host to MASTER_ADDR '", host,
           "'; set LOCKSTEP_SOCKET_IFNAME to the interface to use");
  return out;
}

// § Note [SIGPIPE]
// Writing to a socket whose peer has died raises SIGPIPE, which by default
// kills the process — before Gloo could report the error. (Python ignores
// SIGPIPE, which is why PyTorch never sees this.) Rather than change the
// process-wide disposition, the constructor blocks SIGPIPE in its own thread
// while it creates Gloo's event-loop thread and our worker threads, which
// inherit that mask; their writes then fail with EPIPE and Gloo throws.
class BlockSigpipeForNewThreads {
 public:
  BlockSigpipeForNewThreads() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &saved_);
  }
  ~BlockSigpipeForNewThreads() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }

 private:
  sigset_t saved_;
};

// Gloo tags are 32 bits: collective #k uses k (mod 2^31) (see Note [Collective
// order]); fingerprints travel on a slot of their own (Note [Fingerprints exchanged in
// batches over Gloo]).
uint32_t data_tag(int64_t seq) { return static_cast<uint32_t>(seq & 0x7fffffff); }


}  // namespace

ProcessGroupGloo::ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, Options options)
    : ProcessGroup(rank, size), options_(std::move(options)) {
  LS_CHECK(store != nullptr, "ProcessGroupGloo: store is null");
  LS_CHECK(size >= 1 && rank >= 0 && rank < size, "ProcessGroupGloo: rank ", rank,
           " is out of range for world size ", size);
  timeout_ = options_.timeout;

  gloo::transport::tcp::attr attr;
  if (options_.iface.empty() && options_.hostname.empty()) {
    if (const char* env = std::getenv("LOCKSTEP_SOCKET_IFNAME"); env != nullptr && *env) {
      options_.iface = env;
    }
  }
  if (!options_.iface.empty()) {
    attr.iface = options_.iface;
    device_description_ = options_.iface;
  } else {
    attr.hostname = !options_.hostname.empty() ? options_.hostname
                    : is_loopback(options_.master_addr) ? std::string("127.0.0.1")
                                                        : local_address_towards(options_.master_addr);
    device_description_ = attr.hostname;
  }

  // The environment is read before connecting: a malformed value fails on
  // every rank alike, instead of on one rank after the others started the
  // rendezvous through its store.
  constexpr long long kMaxBytes = 1LL << 40;
  options_.threads = static_cast<int>(
      env_int("LOCKSTEP_GLOO_THREADS", options_.threads, 1, 64, "ProcessGroupGloo's worker threads"));
  options_.chunk_bytes = static_cast<size_t>(
      env_int("LOCKSTEP_GLOO_CHUNK_BYTES", static_cast<long long>(options_.chunk_bytes), 1, kMaxBytes,
              "bytes of the pieces ProcessGroupGloo cuts a large allreduce into"));
  options_.ring_threshold_bytes = static_cast<size_t>(
      env_int("LOCKSTEP_GLOO_RING_THRESHOLD", static_cast<long long>(options_.ring_threshold_bytes), 1, kMaxBytes,
              "bytes from which ProcessGroupGloo's allreduce runs as a ring"));
  if (const char* env = std::getenv("LOCKSTEP_SHM"); env != nullptr && *env) {
    LS_CHECK(std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0, "ProcessGroupGloo: LOCKSTEP_SHM='", env,
             "' must be 0 (collectives over TCP only) or 1 (shared memory between ranks of one host)");
    options_.shared_memory = env[0] == '1';
  }
  if (const char* env = std::getenv("LOCKSTEP_SHM_BUFFERS"); env != nullptr && *env) {
    LS_CHECK(std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0, "ProcessGroupGloo: LOCKSTEP_SHM_BUFFERS='",
             env, "' must be 0 (every shared-memory collective copies through the slots) or 1 (buffers the "
             "peers read in place)");
    options_.shm_buffers = env[0] == '1';
  }
  options_.shm_slot_bytes = static_cast<size_t>(
      env_int("LOCKSTEP_SHM_SLOT_BYTES", static_cast<long long>(options_.shm_slot_bytes), 1, kMaxBytes,
              "bytes of a rank's chunk in a shared-memory step, a multiple of 64"));
  if (options_.shared_memory) (void)detail::shm_spin_from_env();  // read again by the channel
  LS_CHECK(options_.shm_slot_bytes >= 64 && options_.shm_slot_bytes % 64 == 0,
           "ProcessGroupGloo: shm_slot_bytes = ", options_.shm_slot_bytes, " must be a positive multiple of 64");
  options_.check_every_collective = detail::collective_checks_enabled(options_.check_every_collective);
  BlockSigpipeForNewThreads no_sigpipe;  // see Note [SIGPIPE]
  // See Note [Gloo teardown across worker threads] (process_group_gloo_teardown.h).
  auto context = std::make_shared<gloo_detail::GuardedContext>(rank, size);
  context->setTimeout(options_.timeout);
  try {
    auto device = gloo::transport::tcp::CreateDevice(attr);
    GlooStoreAdapter adapter(store, "gloo/", options_.timeout);
    context->connect(adapter, device);
  } catch (const std::exception& e) {
    throw Error(lockstep::detail::str("ProcessGroupGloo: rank ", rank, " of ", size,
                            " could not connect to its peers (listening on ", device_description_,
                            ", timeout ", options_.timeout.count(), " ms): ", e.what(),
                            "; check that every rank started and that MASTER_ADDR / "
                            "LOCKSTEP_SOCKET_IFNAME name a reachable interface"));
  }
  context_ = std::move(context);
  // Keep the store: on rank 0 it may host the server (TCPStore) that slower
  // ranks are still reading their peers' addresses from.
  store_ = std::move(store);
  queue_ = std::make_unique<detail::WorkQueue>(options_.threads);
  if (options_.shared_memory && size > 1) connect_shared_memory(rank, size);
  if (size > 1) fingerprints_ = std::make_unique<gloo_detail::FingerprintChecks>(context_);
  record_every_fingerprint_ = options_.check_every_collective && shm_ == nullptr;
}

// See Note [Shared memory on one host]; every rank reaches the same decision.
void ProcessGroupGloo::connect_shared_memory(int rank, int size) {
  std::string why_not;
  try {
    shm_ = detail::ShmChannel::connect(*store_, rank, size, options_.shm_slot_bytes, options_.shm_buffers,
                                       options_.timeout, &why_not);
  } catch (const std::exception& e) {
    throw Error(lockstep::detail::str("ProcessGroupGloo: rank ", rank, " of ", size, " could not agree on "
                                      "shared memory with its peers (timeout ", options_.timeout.count(),
                                      " ms): ", e.what(), "; LOCKSTEP_SHM=0 keeps every collective on TCP"));
  }
  if (shm_ == nullptr && !why_not.empty() && rank == 0) {
    std::fprintf(stderr, "lockstep: ProcessGroupGloo: shared memory off, collectives use TCP: %s\n", why_not.c_str());
  }
  if (shm_ != nullptr) shm_queue_ = std::make_unique<detail::WorkQueue>(1);
}

ProcessGroupGloo::~ProcessGroupGloo() {
  shm_queue_.reset();  // drain and join before the segment and the context go away
  queue_.reset();
}

std::shared_ptr<Work> ProcessGroupGloo::enqueue(Pending pending, bool collective) {
  std::lock_guard<std::mutex> lock(issue_mutex_);
  // Point-to-point ops number separately: the ranks they do not involve must
  // still agree on every collective's sequence number (its tag).
  pending.fingerprint.seq = collective ? next_seq_++ : next_p2p_seq_++;
  pending.description = lockstep::detail::str(detail::describe(pending.fingerprint),
                                              pending.on_shm ? " (gloo, shared memory, rank " : " (gloo, rank ",
                                              rank_, ")");
  pending.timeout = timeout();
  if (collective && shm_ != nullptr && !pending.on_shm) check_in_shared_memory_first(pending);
  if (collective) record_fingerprint(pending);
  auto work = std::make_shared<Work>(pending.description);
  detail::WorkQueue& queue = pending.on_shm ? *shm_queue_ : *queue_;
  queue.enqueue(work, [this, p = std::move(pending)] { return run(p); });
  return work;
}

// Several consecutive collectives (the pieces of one allreduce) behind one Work,
// which completes when the last piece does, or fails with the first error.
std::shared_ptr<Work> ProcessGroupGloo::enqueue(std::vector<Pending> parts, std::vector<Tensor> result) {
  if (parts.size() == 1) {
    parts[0].fingerprint.reserved = 0;
    return enqueue(std::move(parts[0]));
  }
  struct Joint {
    std::mutex mutex;
    size_t remaining;
    std::exception_ptr error;
    std::promise<void> checked;  // piece 1 passed check_before_running
    std::shared_future<void> checked_future = checked.get_future().share();
  };
  std::lock_guard<std::mutex> lock(issue_mutex_);
  auto joint = std::make_shared<Joint>();
  joint->remaining = parts.size();
  auto whole = parts[0].fingerprint;
  whole.seq = next_seq_;
  auto work = std::make_shared<Work>(lockstep::detail::str(detail::describe(whole), " in ", parts.size(),
                                                           " pieces (gloo, rank ", rank_, ")"));
  for (size_t k = 0; k < parts.size(); ++k) {
    Pending p = std::move(parts[k]);
    p.fingerprint.seq = next_seq_++;
    p.description = lockstep::detail::str(detail::describe(p.fingerprint), " piece ", k + 1, "/",
                                          parts.size(), " (gloo, rank ", rank_, ")");
    p.timeout = timeout();
    if (k == 0 || record_every_fingerprint_) record_fingerprint(p, k == 0);  // piece 1's names the whole tensor
    queue_->enqueue(std::make_shared<Work>(p.description), [this, p = std::move(p), joint, work, result, k] {
      std::exception_ptr error;
      try {
        // Pieces 2.. move no data until piece 1 has passed the checks, so a
        // mismatch stops every piece on every rank (piece 1 started first: FIFO).
        if (k == 0) {
          try {
            check_before_running(p);
            joint->checked.set_value();
          } catch (...) {
            joint->checked.set_exception(std::current_exception());
            throw;
          }
        } else {
          joint->checked_future.get();
        }
        execute(p);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> guard(joint->mutex);
      if (error && !joint->error) joint->error = error;
      if (--joint->remaining == 0) {
        if (joint->error) work->mark_failed(joint->error);
        else work->mark_completed(result);
      }
      return std::vector<Tensor>{};
    });
  }
  return work;
}

// With shared memory, a collective that moves its data over TCP (reduce,
// reduce_scatter, barrier) runs on the shared-memory worker too, after one
// fingerprint step there: every collective of the group is then checked in the
// same order and place, so one rank's barrier against another's broadcast is a
// mismatch error, not a timeout (Note [Shared memory on one host]).
void ProcessGroupGloo::check_in_shared_memory_first(Pending& p) {
  p.on_shm = true;
  p.body = [this, body = std::move(p.body), f = p.fingerprint](uint32_t tag, std::chrono::milliseconds timeout) {
    on_shm(tag, f, [&](const detail::Fingerprint& fp) { shm_->check(fp, timeout); });
    return body(tag, timeout);
  };
}

// Called under issue_mutex_, on the caller's thread: records this collective's
// fingerprint for the batched exchange (Note [Fingerprints exchanged in batches
// over Gloo]) — every collective by default, the first one always (Note
// [Collective fingerprints]). The decision depends only on the sequence number
// and the options, so all ranks agree on it, and the recorded collectives are
// always #0, #1, ... without a gap.
// A collective that runs in shared memory carries its fingerprint in every chunk
// it writes there, compared before any of its data is read (Note [Shared memory
// on one host]), so with shared memory only the first is recorded: the check
// costs no message, and a dead or silent peer is named by the shared-memory wait.
void ProcessGroupGloo::record_fingerprint(Pending& p, bool checkable) {
  if (fingerprints_ == nullptr || !(p.fingerprint.seq == 0 || record_every_fingerprint_)) return;
  p.checked = checkable;
  fingerprints_->record(p.fingerprint, checkable);
}

// The check entry point: every collective passes here on its worker thread
// before any of its data moves. Is the group still usable, and (when its
// fingerprint was posted) do all ranks agree on this collective? A mismatch
// throws on every rank alike, naming both ranks' calls; it also breaks the
// group, because collectives issued after it may already be running, and a
// size mismatch can leave the ranks' sequence numbers apart (Note [Large
// allreduce in chunks]).
void ProcessGroupGloo::check_before_running(const Pending& p) {
  {
    std::lock_guard<std::mutex> lock(broken_mutex_);
    if (!broken_.empty()) {
      throw Error(lockstep::detail::str("gloo ", p.description, ": the process group is unusable after an "
                                        "earlier failure: ", broken_));
    }
  }
  if (!p.checked) return;
  try {
    fingerprints_->check(p.fingerprint.seq, p.timeout);
  } catch (const gloo::Exception& e) {
    fail(p, e.what());
  } catch (const std::exception& e) {
    mark_broken(e.what());
    throw;
  }
}

// The collective itself; a transport failure (peer gone, timeout) breaks the
// group for good: Gloo's pairs cannot be brought back in step.
std::vector<Tensor> ProcessGroupGloo::execute(const Pending& p) {
  try {
    return p.body(data_tag(p.fingerprint.seq), p.timeout);
  } catch (const gloo::Exception& e) {
    fail(p, e.what());
  }
}

std::vector<Tensor> ProcessGroupGloo::run(const Pending& p) {
  check_before_running(p);
  return execute(p);
}

void ProcessGroupGloo::on_shm(uint32_t tag, detail::Fingerprint fingerprint,
                              const std::function<void(const detail::Fingerprint&)>& call) {
  fingerprint.seq = tag;  // the sequence number, as every rank numbers it
  try {
    call(fingerprint);
  } catch (const detail::ShmFailure& e) {
    throw gloo::IoException(e.what());  // execute() reports it and breaks the group
  } catch (const std::exception& e) {
    mark_broken(e.what());  // mismatched collectives: the ranks are out of step
    throw;
  }
}

void ProcessGroupGloo::mark_broken(const std::string& failure) {
  std::lock_guard<std::mutex> lock(broken_mutex_);
  if (broken_.empty()) broken_ = failure;
}

[[noreturn]] void ProcessGroupGloo::fail(const Pending& p, const std::string& what) {
  const std::string failure = lockstep::detail::str(
      p.description, " failed: ", what, " (timeout ", p.timeout.count(),
      " ms; a peer rank may have exited, crashed, or stopped issuing collectives)");
  mark_broken(failure);
  throw Error(lockstep::detail::str("gloo ", failure));
}

}  // namespace lockstep::distributed
