// tests/data/idx_files.h — writing small IDX files (plain or gzipped) into a
// fresh temporary directory, for the IDX reader and FashionMNIST tests.
#pragma once

#include <stdlib.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace lockstep_test {

// A directory made with mkdtemp (unique even when CTest runs tests in parallel),
// removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "lockstep_data_XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// The header of an unsigned-byte IDX file with the given dim sizes.
inline std::vector<uint8_t> idx_header(const std::vector<uint32_t>& sizes) {
  std::vector<uint8_t> out = {0, 0, 0x08, static_cast<uint8_t>(sizes.size())};
  for (uint32_t s : sizes) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(s >> shift));
  }
  return out;
}

// Header followed by `payload`.
inline std::vector<uint8_t> idx_file(const std::vector<uint32_t>& sizes,
                                     const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out = idx_header(sizes);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

inline void write_plain(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

inline void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("cannot gzopen " + path);
  int written = bytes.empty() ? 0 : gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
  if (written != static_cast<int>(bytes.size())) throw std::runtime_error("gzwrite failed");
}

// A deterministic byte pattern of length n.
inline std::vector<uint8_t> pattern(size_t n, unsigned mod = 251) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>((i * 7 + 3) % mod);
  return out;
}

}  // namespace lockstep_test
