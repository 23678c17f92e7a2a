// distributed/process_group/shm/shm_segment.h — one POSIX shared-memory segment, mapped.
//
// A ShmSegment is a named file in /dev/shm (shm_open), sized and mapped into
// this process. The rank that creates it (create()) picks a name no earlier job
// used: O_CREAT|O_EXCL refuses an existing name, so a stale segment left by a
// crashed job is never reused silently. The others open() the same name. Once
// every rank has mapped it the creator unlink()s the name: the memory stays
// mapped in every process and the kernel frees it when the last one exits, even
// after a crash — nothing is left in /dev/shm (Note [Shared-memory rendezvous],
// shm_rendezvous.cpp).
//
// tmpfs hands out pages lazily, so a segment that /dev/shm has no room for would
// map fine and kill the process with SIGBUS at its first write into a missing
// page. create() therefore reserves every page up front (posix_fallocate): a
// full or too small /dev/shm (Docker's default is 64 MB) is an error here,
// with a message naming the sizes, instead of a crash later.
// Read before: distributed/process_group/shm/shm_channel.h. Read next: shm_segment.cpp.
#pragma once

#include <cstddef>
#include <string>

namespace lockstep::distributed::detail {

class ShmSegment {
 public:
  // Creates and maps `name` ("/lockstep-..."), `bytes` long, zero-filled.
  // Throws ls::Error (name exists, /dev/shm too small or full, mmap failed).
  static ShmSegment create(const std::string& name, size_t bytes);
  // Maps an existing segment; throws ls::Error unless it exists with `bytes` bytes.
  static ShmSegment open(const std::string& name, size_t bytes);

  ShmSegment() = default;
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();  // unmaps; unlinks the name if this process created it and has not yet

  // Removes the name from /dev/shm (the mapping stays valid). Idempotent.
  void unlink();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  void reset() noexcept;

  std::string name_;
  void* data_ = nullptr;
  size_t size_ = 0;
  bool owns_name_ = false;  // created here and not unlinked yet
};

}  // namespace lockstep::distributed::detail
