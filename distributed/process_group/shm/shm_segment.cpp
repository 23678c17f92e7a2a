// distributed/process_group/shm/shm_segment.cpp — shm_open, posix_fallocate, mmap, shm_unlink.
// Read before: distributed/process_group/shm/shm_segment.h.
#include "distributed/process_group/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace lockstep::distributed::detail {
namespace {

std::string mib(size_t bytes) { return lockstep::detail::str(bytes >> 20, " MiB"); }

// Maps `bytes` of `fd` read-write and shared; closes fd either way.
void* map_shared(int fd, size_t bytes, const std::string& name) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  LS_CHECK(p != MAP_FAILED, "shared memory: cannot map ", name, " (", mib(bytes), "): ", std::strerror(err));
  return p;
}

}  // namespace

ShmSegment ShmSegment::create(const std::string& name, size_t bytes) {
  struct statvfs fs {};
  if (statvfs("/dev/shm", &fs) == 0) {
    const size_t available = static_cast<size_t>(fs.f_bavail) * fs.f_frsize;
    LS_CHECK(available >= bytes, "shared memory: /dev/shm has ", mib(available), " free, the segment needs ",
             mib(bytes), " (enlarge it, e.g. docker run --shm-size=1g, or set LOCKSTEP_SHM_SLOT_BYTES lower)");
  }
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  LS_CHECK(fd >= 0, "shared memory: cannot create ", name, ": ", std::strerror(errno),
           errno == EEXIST ? " (a segment of that name exists: it is never reused; remove it from /dev/shm)" : "");
  ShmSegment s;
  s.name_ = name;
  s.owns_name_ = true;  // from here on, an error below unlinks the name (destructor)
  // posix_fallocate returns the error instead of setting errno.
  int rc = ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
  if (rc == 0) rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    close(fd);
    throw Error(lockstep::detail::str("shared memory: cannot reserve ", mib(bytes), " for ", name, " in /dev/shm: ",
                                      std::strerror(rc), " (is /dev/shm full or limited?)"));
  }
  s.data_ = map_shared(fd, bytes, name);
  s.size_ = bytes;
  return s;
}

ShmSegment ShmSegment::open(const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  LS_CHECK(fd >= 0, "shared memory: cannot open ", name, ": ", std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    throw Error(lockstep::detail::str("shared memory: ", name, " has ", st.st_size, " bytes, expected ", bytes));
  }
  ShmSegment s;
  s.name_ = name;
  s.data_ = map_shared(fd, bytes, name);
  s.size_ = bytes;
  return s;
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept { *this = std::move(other); }

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    reset();
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owns_name_ = std::exchange(other.owns_name_, false);
  }
  return *this;
}

ShmSegment::~ShmSegment() { reset(); }

void ShmSegment::unlink() {
  if (owns_name_) shm_unlink(name_.c_str());
  owns_name_ = false;
}

void ShmSegment::reset() noexcept {
  unlink();
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace lockstep::distributed::detail
