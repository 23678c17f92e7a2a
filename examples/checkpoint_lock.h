// examples/checkpoint_lock.h — one run per checkpoint: an advisory lock held for the
// whole run, so that a second run writing the same file refuses at start.
//
// § Note [Checkpoint lock]
// A checkpoint is replaced by rename (Note [Atomic checkpoint writes] in nn/serialize.h),
// so the lock cannot sit on the checkpoint's own inode: it is an flock(2) on the file
// "<checkpoint>.lock" beside it (beside the symlink's target when --checkpoint is a
// link, so two links to one file share one lock), which holds the PID of the run that
// holds it. Rank 0, which writes the checkpoint, takes it before anything is trained and
// keeps it until it exits; a second run (fresh, --resume or --resume auto) then finds the
// lock taken and stops with exit 2, naming the other run's PID. The kernel drops the lock
// when its holder dies, SIGKILL included, so a crashed run never blocks the next one (a
// launcher's restart takes it again). The holder removes the file when it ends normally;
// whoever takes the lock checks that the file it locked is still the one at that path
// (a holder may remove it in between), and tries again when not.
// Read before: examples/train_checkpoint.h. Read next: examples/train_run.h (start()).
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

namespace train {

class CheckpointLock {
 public:
  CheckpointLock() = default;
  CheckpointLock(const CheckpointLock&) = delete;
  CheckpointLock& operator=(const CheckpointLock&) = delete;
  CheckpointLock(CheckpointLock&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) { other.fd_ = -1; }
  CheckpointLock& operator=(CheckpointLock&& other) noexcept {
    std::swap(fd_, other.fd_);
    std::swap(path_, other.path_);
    return *this;
  }
  ~CheckpointLock() {
    if (fd_ < 0) return;
    ::unlink(path_.c_str());  // still holding the lock: nobody can have it now
    ::close(fd_);
  }

  // The lock file of `checkpoint` (Note [Checkpoint lock]).
  static std::string lock_path(const std::string& checkpoint) {
    std::error_code ec;
    const std::filesystem::path target = std::filesystem::weakly_canonical(checkpoint, ec);
    return (ec ? std::filesystem::path(checkpoint) : target).string() + ".lock";
  }

  // Takes the lock of `checkpoint`; "" when held, else why not (another run's PID, or an error).
  std::string acquire(const std::string& checkpoint) {
    path_ = lock_path(checkpoint);
    for (int attempt = 0; attempt < 100; ++attempt) {
      const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0) return "cannot create the lock file '" + path_ + "': " + std::strerror(errno);
      if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        const std::string holder = read_pid(fd);
        ::close(fd);
        if (err != EWOULDBLOCK) return "cannot lock '" + path_ + "': " + std::strerror(err);
        return "the checkpoint " + checkpoint + " is in use by another run (" +
               (holder.empty() ? std::string("its PID is not recorded") : "PID " + holder) + ", which holds '" +
               path_ + "'); two runs writing one checkpoint would overwrite each other: wait for that run to "
               "end, or choose another --checkpoint";
      }
      struct stat locked {}, now {};
      if (::fstat(fd, &locked) == 0 && ::stat(path_.c_str(), &now) == 0 && locked.st_ino == now.st_ino &&
          locked.st_dev == now.st_dev) {
        const std::string pid = std::to_string(::getpid()) + "\n";
        if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
          const std::string why = std::strerror(errno);
          ::close(fd);
          return "cannot write the lock file '" + path_ + "': " + why;
        }
        fd_ = fd;
        return "";
      }
      ::close(fd);  // its holder removed it after we opened it: lock the new one
    }
    return "cannot take the lock '" + path_ + "': it keeps being replaced";
  }

 private:
  static std::string read_pid(int fd) {
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    std::string pid(buf, n > 0 ? static_cast<size_t>(n) : 0);
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    return pid.find_first_not_of("0123456789") == std::string::npos ? pid : "";
  }

  int fd_ = -1;
  std::string path_;
};

}  // namespace train
