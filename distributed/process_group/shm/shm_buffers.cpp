// distributed/process_group/shm/shm_buffers.cpp — memfd buffers the peers map through
// /proc, their registry, and the ring that tells peers a buffer is gone.
// Read before: distributed/process_group/shm/shm_buffers.h (Note [Shared-memory buffers]).
// Read next: distributed/process_group/shm/shm_channel.cpp.
#include "distributed/process_group/shm/shm_buffers.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <sstream>

#include "core/error.h"
#include "distributed/store/store.h"

namespace lockstep::distributed::detail {
namespace {

// A new memfd of `bytes` (zero-filled), or -1 with errno set.
int new_memfd(const char* name, size_t bytes) {
  const int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

// Rank `owner`'s file `fd` mapped here for reading and writing (the in-place
// allreduce writes each share's result into every rank's tensor), or MAP_FAILED
// with *why set.
void* map_peer_file(int32_t pid, int32_t fd, size_t bytes, std::string* why) {
  const std::string path = lockstep::detail::str("/proc/", pid, "/fd/", fd);
  const int mine = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (mine < 0) {
    *why = lockstep::detail::str("cannot open ", path, ": ", std::strerror(errno));
    return MAP_FAILED;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mine, 0);
  if (p == MAP_FAILED) *why = lockstep::detail::str("cannot map ", path, ": ", std::strerror(errno));
  close(mine);  // the mapping keeps the file
  return p;
}

Bytes to_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string to_string(const Bytes& b) { return std::string(b.begin(), b.end()); }

}  // namespace

struct ShmBuffers::Registry {
  std::mutex mutex;
  std::map<uintptr_t, ShmBufferRef> live;  // by start address
  ShmRankControl* control = nullptr;        // this rank's; null once the channel is gone
  uint64_t next_id = 1;
};

struct ShmBuffers::Mapping {
  void* data;
  size_t bytes;
  ~Mapping() { munmap(data, bytes); }
};

// One buffer of this rank, alive as long as a tensor over it: frees it and tells the peers.
struct ShmBuffers::Owned {
  std::shared_ptr<Registry> registry;
  void* data = nullptr;
  ShmBufferRef ref;
  ~Owned() {
    {
      std::lock_guard<std::mutex> lock(registry->mutex);
      registry->live.erase(reinterpret_cast<uintptr_t>(data));
      if (ShmRankControl* c = registry->control) {
        const uint64_t n = c->freed_count.load(std::memory_order_relaxed);
        c->freed_ids[n % kShmFreedRing] = ref.id;
        c->freed_count.store(n + 1, std::memory_order_release);
      }
    }
    munmap(data, ref.bytes);
    close(ref.fd);
  }
};

ShmBuffers::ShmBuffers(int rank, int size, ShmRankControl* controls)
    : rank_(rank), size_(size), controls_(controls), registry_(std::make_shared<Registry>()),
      freed_seen_(size, 0) {
  registry_->control = &controls_[rank_];
  for (int q = 0; q < size_; ++q) freed_seen_[q] = controls_[q].freed_count.load(std::memory_order_acquire);
}

ShmBuffers::~ShmBuffers() {
  std::lock_guard<std::mutex> lock(registry_->mutex);
  registry_->control = nullptr;  // the segment goes with the channel; live buffers stay usable
}

bool ShmBuffers::probe(Store& store, int rank, int size, std::chrono::milliseconds timeout, std::string* why_not) {
  auto key = [](const char* what, int r) { return lockstep::detail::str("shm/buffers/", what, "/", r); };
  std::vector<std::string> files, answers;
  for (int r = 0; r < size; ++r) {
    files.push_back(key("file", r));
    answers.push_back(key("answer", r));
  }
  const int fd = new_memfd("lockstep-probe", 4096);
  store.set(files[rank], to_bytes(fd < 0 ? std::string("-1 -1")
                                         : lockstep::detail::str(getpid(), " ", fd)));
  store.wait(files, timeout);
  std::string answer = fd < 0 ? lockstep::detail::str("memfd_create failed: ", std::strerror(errno)) : "ok";
  for (int q = 0; q < size && answer == "ok"; ++q) {
    if (q == rank) continue;
    std::istringstream in(to_string(store.get(files[q])));
    int32_t pid = -1, peer_fd = -1;
    in >> pid >> peer_fd;
    if (pid < 0) continue;  // rank q reports its own failure
    std::string why;
    void* p = map_peer_file(pid, peer_fd, 4096, &why);
    if (p == MAP_FAILED) {
      answer = lockstep::detail::str("rank ", q, "'s: ", why);
    } else {
      munmap(p, 4096);
    }
  }
  store.set(answers[rank], to_bytes(answer));
  store.wait(answers, timeout);  // every rank has probed: the probe files can go
  if (fd >= 0) close(fd);
  for (int r = 0; r < size; ++r) {
    const std::string a = to_string(store.get(answers[r]));
    if (a != "ok") {
      *why_not = lockstep::detail::str("rank ", r, " cannot map its peers' buffers (", a, ")");
      return false;
    }
  }
  return true;
}

void* ShmBuffers::allocate(size_t bytes, std::shared_ptr<void>* owner) {
  const size_t rounded = shm_round_up(std::max<size_t>(bytes, 1), 4096);
  const int fd = new_memfd("lockstep-buffer", rounded);
  LS_CHECK(fd >= 0, "shared memory (rank ", rank_, "): cannot create a buffer of ", rounded,
           " bytes for the group's collectives: ", std::strerror(errno));
  void* data = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    const int saved = errno;
    close(fd);
    throw Error(lockstep::detail::str("shared memory (rank ", rank_, "): cannot map a buffer of ", rounded,
                                      " bytes: ", std::strerror(saved)));
  }
  auto buffer = std::make_shared<Owned>();
  buffer->registry = registry_;
  buffer->data = data;
  {
    std::lock_guard<std::mutex> lock(registry_->mutex);
    buffer->ref = ShmBufferRef{registry_->next_id++, fd, 0, rounded, 0};
    registry_->live[reinterpret_cast<uintptr_t>(data)] = buffer->ref;
  }
  *owner = std::move(buffer);
  return data;
}

ShmBufferRef ShmBuffers::find(const void* p, size_t bytes) const {
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(registry_->mutex);
  auto it = registry_->live.upper_bound(at);  // the first buffer starting after p
  if (it == registry_->live.begin()) return {};
  --it;
  if (at + bytes > it->first + it->second.bytes) return {};
  ShmBufferRef ref = it->second;
  ref.offset = at - it->first;
  return ref;
}

void ShmBuffers::drop_freed(int q) {
  const uint64_t n = controls_[q].freed_count.load(std::memory_order_acquire);
  if (n - freed_seen_[q] > kShmFreedRing) {  // the ring moved on: forget all of q's
    for (auto it = peers_.begin(); it != peers_.end();) it = it->first.first == q ? peers_.erase(it) : std::next(it);
  } else {
    for (uint64_t k = freed_seen_[q]; k < n; ++k) peers_.erase({q, controls_[q].freed_ids[k % kShmFreedRing]});
  }
  freed_seen_[q] = n;
}

uint8_t* ShmBuffers::peer(int q, const ShmBufferRef& ref) {
  drop_freed(q);
  auto& slot = peers_[{q, ref.id}];
  if (slot == nullptr || slot->bytes != ref.bytes) {
    std::string why;
    void* p = map_peer_file(controls_[q].pid, ref.fd, ref.bytes, &why);
    if (p == MAP_FAILED) {
      peers_.erase({q, ref.id});
      throw Error(lockstep::detail::str("shared memory (rank ", rank_, "): cannot map rank ", q, "'s buffer ",
                                        ref.id, " (", ref.bytes, " bytes): ", why));
    }
    slot.reset(new Mapping{p, ref.bytes});
  }
  return static_cast<uint8_t*>(slot->data) + ref.offset;
}

}  // namespace lockstep::distributed::detail
