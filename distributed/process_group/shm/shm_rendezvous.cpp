// distributed/process_group/shm/shm_rendezvous.cpp — ShmChannel::connect: do all ranks
// share this host, and if so, one segment mapped by all of them.
//
// § Note [Shared-memory rendezvous]
// 1. Every rank publishes its host identity in the group's store (under
//    "shm/"): the hostname, the kernel's boot id, the device number of the
//    /dev/shm file system, the PID namespace and the network namespace. Equal
//    identities mean the ranks see the same /dev/shm (so the same segment) and
//    each other's PIDs (so a peer's death can be noticed, Note [Shared-memory
//    waiting]). The network namespace is there because ranks put in namespaces
//    of their own were put there to talk through a network (containers, or
//    bench/hosts.sh's simulated hosts): they keep it. If any part differs,
//    every rank returns null at once and the group stays on Gloo.
// 2. Rank 0 creates the segment under a name no job used before
//    ("/lockstep-<pid>-<64 random bits>", created with O_EXCL) and publishes
//    the name and slot size; the others map it. Each rank publishes "ok" or
//    why it failed.
// 3. When all ranks have answered, rank 0 unlinks the name: nothing is left
//    in /dev/shm, even if the job is later killed, and the memory is freed
//    when the last rank exits. If any rank failed, every rank returns null
//    with the reason and the group falls back to Gloo (the caller warns once).
// 4. Unless the group turned them off, the ranks probe whether each can map
//    the others' buffers (Note [Shared-memory buffers]); if not, rank 0 says
//    why once and the channel works through its slots only.
// Read before: distributed/process_group/shm/shm_channel.h, shm_segment.h.
// Read next: distributed/process_group/process_group_gloo.cpp.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <new>
#include <random>
#include <sstream>

#include "core/error.h"
#include "distributed/process_group/shm/shm_channel.h"
#include "distributed/process_group/shm/shm_layout.h"
#include "distributed/store/store.h"

namespace lockstep::distributed::detail {
namespace {

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The namespace a /proc/self/ns link names, e.g. "pid:[4026531836]"; "?" if unreadable.
std::string namespace_of(const char* link) {
  char target[64] = {0};
  const ssize_t n = readlink(link, target, sizeof(target) - 1);
  return n > 0 ? std::string(target, n) : std::string("?");
}

Bytes to_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string to_string(const Bytes& b) { return std::string(b.begin(), b.end()); }

std::string fresh_name() {
  std::random_device random;
  const uint64_t bits = (static_cast<uint64_t>(random()) << 32) ^ random();
  std::ostringstream name;
  name << "/lockstep-" << getpid() << "-" << std::hex << bits;
  return name.str();
}

// Rank 0: the segment, its header and counters initialized (the memory is zero-filled).
ShmSegment create_segment(const std::string& name, int size, size_t slot_bytes) {
  ShmSegment segment = ShmSegment::create(name, ShmChannel::segment_bytes(size, slot_bytes));
  auto* header = new (segment.data()) ShmHeader{};
  header->magic = kShmMagic;
  header->version = kShmVersion;
  header->size = size;
  header->slot_bytes = slot_bytes;
  auto* controls = reinterpret_cast<ShmRankControl*>(static_cast<uint8_t*>(segment.data()) + kShmHeaderBytes);
  for (int r = 0; r < size; ++r) new (&controls[r]) ShmRankControl{};
  return segment;
}

ShmSegment open_segment(const std::string& name, int size, size_t slot_bytes) {
  ShmSegment segment = ShmSegment::open(name, ShmChannel::segment_bytes(size, slot_bytes));
  const auto* header = static_cast<const ShmHeader*>(segment.data());
  LS_CHECK(header->magic == kShmMagic && header->version == kShmVersion && header->size == size &&
               header->slot_bytes == slot_bytes,
           "shared memory: ", name, " is not this group's segment (header mismatch)");
  return segment;
}

}  // namespace

// Equal on two processes exactly when they share a /dev/shm, a PID namespace and a
// network namespace.
std::string shm_host_identity() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  struct stat shm {};
  const bool has_shm = stat("/dev/shm", &shm) == 0;
  return lockstep::detail::str(host, "|", read_first_line("/proc/sys/kernel/random/boot_id"), "|",
                               has_shm ? static_cast<long long>(shm.st_dev) : -1LL, "|",
                               namespace_of("/proc/self/ns/pid"), "|", namespace_of("/proc/self/ns/net"));
}

std::unique_ptr<ShmChannel> ShmChannel::connect(Store& store, int rank, int size, size_t slot_bytes, bool buffers,
                                                std::chrono::milliseconds timeout, std::string* why_not) {
  why_not->clear();
  auto key = [](const char* what, int r) { return lockstep::detail::str("shm/", what, "/", r); };
  std::vector<std::string> hosts, mapped;
  for (int r = 0; r < size; ++r) {
    hosts.push_back(key("host", r));
    mapped.push_back(key("mapped", r));
  }
  // 1. One host?
  const std::string me = shm_host_identity();
  store.set(hosts[rank], to_bytes(me));
  store.wait(hosts, timeout);
  for (int r = 0; r < size; ++r) {
    if (to_string(store.get(hosts[r])) != me) return nullptr;
  }
  // 2. Rank 0 creates, the others map.
  ShmSegment segment;
  std::string status = "ok";
  if (rank == 0) {
    const std::string name = fresh_name();
    try {
      segment = create_segment(name, size, slot_bytes);
      store.set("shm/segment", to_bytes(lockstep::detail::str(name, " ", slot_bytes)));
    } catch (const Error& e) {
      store.set("shm/segment", to_bytes(lockstep::detail::str("! ", e.what())));
      *why_not = e.what();
      return nullptr;
    }
  } else {
    store.wait({"shm/segment"}, timeout);
    const std::string published = to_string(store.get("shm/segment"));
    if (published.rfind("! ", 0) == 0) {
      *why_not = lockstep::detail::str("rank 0: ", published.substr(2));
      return nullptr;
    }
    std::istringstream in(published);
    std::string name;
    in >> name >> slot_bytes;
    try {
      segment = open_segment(name, size, slot_bytes);
    } catch (const Error& e) {
      status = lockstep::detail::str("! ", e.what());
    }
  }
  if (segment.data() != nullptr) {
    auto* controls = reinterpret_cast<ShmRankControl*>(static_cast<uint8_t*>(segment.data()) + kShmHeaderBytes);
    controls[rank].pid = static_cast<int32_t>(getpid());
  }
  store.set(mapped[rank], to_bytes(status));
  // 3. Everyone answered: the name can go (Note [Shared-memory rendezvous]).
  store.wait(mapped, timeout);
  segment.unlink();
  for (int r = 0; r < size; ++r) {
    const std::string answer = to_string(store.get(mapped[r]));
    if (answer != "ok") {
      *why_not = lockstep::detail::str("rank ", r, ": ", answer.substr(2));
      return nullptr;
    }
  }
  // 4. Can the ranks map each other's buffers (Note [Shared-memory buffers])?
  if (buffers) {
    std::string no_buffers;
    buffers = ShmBuffers::probe(store, rank, size, timeout, &no_buffers);
    if (!buffers && rank == 0) {
      std::fprintf(stderr, "[lockstep] shared memory: %s; collectives copy through the channel's slots\n",
                   no_buffers.c_str());
    }
  }
  return std::unique_ptr<ShmChannel>(new ShmChannel(std::move(segment), rank, size, slot_bytes, buffers));
}

}  // namespace lockstep::distributed::detail
