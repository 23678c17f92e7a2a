// distributed/store/file_store.cpp — FileStore: an append-only log of set/delete
// records under flock, replayed incrementally (Note [FileStore log]).
// Read before: distributed/store/file_store.h.
#include "distributed/store/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "distributed/store/store_util.h"

namespace lockstep::distributed {

namespace {

constexpr uint32_t kMaxField = 64u << 20;  // a key or value over 64 MiB means a corrupt log

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t get_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

std::string record(char kind, const std::string& key, const Bytes& value) {
  std::string out;
  out.reserve(9 + key.size() + value.size());
  out.push_back(kind);
  put_u32(out, static_cast<uint32_t>(key.size()));
  out += key;
  put_u32(out, static_cast<uint32_t>(value.size()));
  out.append(value.begin(), value.end());
  return out;
}

}  // namespace

// An open descriptor of the log holding flock(`exclusive` ? LOCK_EX : LOCK_SH),
// with the store's cache replayed up to the end of the file.
class FileStore::Locked {
 public:
  Locked(FileStore& store, bool exclusive) : store_(store) {
    fd_ = ::open(store.path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    LS_CHECK(fd_ >= 0, "FileStore: cannot open '", store.path_, "': ", std::strerror(errno),
             "; the path must be on a file system every rank can write");
    int rc;
    do {
      rc = ::flock(fd_, exclusive ? LOCK_EX : LOCK_SH);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      int err = errno;
      ::close(fd_);
      throw Error(detail::str("FileStore: flock('", store.path_, "') failed: ", std::strerror(err)));
    }
    replay();
  }
  ~Locked() { ::close(fd_); }  // closing releases the flock
  Locked(const Locked&) = delete;
  Locked& operator=(const Locked&) = delete;

  // Appends one record (caller holds LOCK_EX) and applies it to the cache.
  void append(char kind, const std::string& key, const Bytes& value) {
    LS_CHECK(key.size() <= kMaxField && value.size() <= kMaxField, "FileStore: key '",
             key.substr(0, 64), "' or its value exceeds the 64 MiB limit (", value.size(), " bytes)");
    std::string rec = record(kind, key, value);
    size_t done = 0;
    while (done < rec.size()) {
      ssize_t n = ::pwrite(fd_, rec.data() + done, rec.size() - done,
                           static_cast<off_t>(store_.offset_ + done));
      if (n < 0 && errno == EINTR) continue;
      LS_CHECK(n > 0, "FileStore: writing '", store_.path_, "' failed: ", std::strerror(errno));
      done += static_cast<size_t>(n);
    }
    store_.offset_ += rec.size();
    apply(kind, key, value);
  }

 private:
  void apply(char kind, const std::string& key, const Bytes& value) {
    if (kind == 'S') store_.cache_[key] = value;
    else store_.cache_.erase(key);
  }

  void replay() {
    struct stat st {};
    LS_CHECK(::fstat(fd_, &st) == 0, "FileStore: fstat('", store_.path_, "') failed: ", std::strerror(errno));
    uint64_t size = static_cast<uint64_t>(st.st_size);
    if (size < store_.offset_) {  // the file was replaced or truncated: start over
      store_.cache_.clear();
      store_.offset_ = 0;
    }
    if (size == store_.offset_) return;
    std::vector<uint8_t> buf(size - store_.offset_);
    size_t got = 0;
    while (got < buf.size()) {
      ssize_t n = ::pread(fd_, buf.data() + got, buf.size() - got, static_cast<off_t>(store_.offset_ + got));
      if (n < 0 && errno == EINTR) continue;
      LS_CHECK(n > 0, "FileStore: reading '", store_.path_, "' failed: ", n == 0 ? "unexpected end" : std::strerror(errno));
      got += static_cast<size_t>(n);
    }
    size_t p = 0;
    auto corrupt = [&](const char* what) {
      throw Error(detail::str("FileStore: '", store_.path_, "' is not a FileStore log (", what,
                              " at byte ", store_.offset_ + p, "); was it written by something else, or "
                              "did a writer die mid-record? Remove the file and restart"));
    };
    while (p < buf.size()) {
      if (buf.size() - p < 9) corrupt("truncated record header");
      char kind = static_cast<char>(buf[p]);
      if (kind != 'S' && kind != 'D') corrupt("unknown record kind");
      uint32_t klen = get_u32(&buf[p + 1]);
      if (klen > kMaxField || buf.size() - p - 5 < klen + 4ull) corrupt("bad key length");
      std::string key(reinterpret_cast<const char*>(&buf[p + 5]), klen);
      uint32_t vlen = get_u32(&buf[p + 5 + klen]);
      size_t vstart = p + 9 + klen;
      if (vlen > kMaxField || buf.size() - vstart < vlen) corrupt("bad value length");
      apply(kind, key, Bytes(buf.begin() + vstart, buf.begin() + vstart + vlen));
      p = vstart + vlen;
    }
    store_.offset_ = size;
  }

  FileStore& store_;
  int fd_ = -1;
};

FileStore::FileStore(std::string path) : path_(std::move(path)) {
  std::lock_guard<std::mutex> guard(mutex_);
  Locked file(*this, /*exclusive=*/false);  // creates the file, checks it parses
}

void FileStore::set(const std::string& key, const Bytes& value) {
  std::lock_guard<std::mutex> guard(mutex_);
  Locked file(*this, true);
  file.append('S', key, value);
}

Bytes FileStore::get(const std::string& key) {
  wait_for({key}, timeout_, "get");
  std::lock_guard<std::mutex> guard(mutex_);
  Locked file(*this, false);
  auto it = cache_.find(key);
  LS_CHECK(it != cache_.end(), "FileStore::get: key '", key, "' was deleted while being read");
  return it->second;
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> guard(mutex_);
  Locked file(*this, true);
  int64_t value = delta;
  auto it = cache_.find(key);
  if (it != cache_.end()) value += store_util::parse_counter("FileStore", key, it->second);
  file.append('S', key, store_util::format_counter(value));
  return value;
}

Bytes FileStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  std::lock_guard<std::mutex> guard(mutex_);
  Locked file(*this, true);
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    if (!expected.empty()) return expected;
  } else if (it->second != expected) {
    return it->second;
  }
  file.append('S', key, desired);
  return desired;
}

std::vector<std::string> FileStore::missing(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> guard(mutex_);
  Locked file(*this, false);
  std::vector<std::string> out;
  for (const auto& k : keys) {
    if (cache_.find(k) == cache_.end()) out.push_back(k);
  }
  return out;
}

void FileStore::wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                         const char* op) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto sleep = std::chrono::milliseconds(1);
  for (;;) {
    std::vector<std::string> absent = missing(keys);
    if (absent.empty()) return;
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) store_util::throw_timeout("FileStore", op, timeout, absent);
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(sleep, deadline - now));
    sleep = std::min(sleep * 2, std::chrono::milliseconds(20));
  }
}

void FileStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  wait_for(keys, timeout, "wait");
}

bool FileStore::check(const std::vector<std::string>& keys) { return missing(keys).empty(); }

bool FileStore::delete_key(const std::string& key) {
  std::lock_guard<std::mutex> guard(mutex_);
  Locked file(*this, true);
  if (cache_.find(key) == cache_.end()) return false;
  file.append('D', key, {});
  return true;
}

int64_t FileStore::num_keys() {
  std::lock_guard<std::mutex> guard(mutex_);
  Locked file(*this, false);
  return static_cast<int64_t>(cache_.size());
}

}  // namespace lockstep::distributed
