// fuzz/make_seeds.cpp — writes the seed corpora of the fuzz targets from valid
// files made by lockstep's own writers, so the seeds follow the formats as the
// code changes:  make_seeds OUT_DIR  →  OUT_DIR/<target>/<name>.
//   safetensors:        save_tensors files (every dtype, 0-d and empty tensors,
//                       metadata), and one laid out as Python's safetensors does
//                       (no checksum, tensors out of name order)
//   safetensors_json:   the headers of those files
//   idx:                image (3-d) and label (1-d) files, plain and gzipped
//   tcp_store_protocol: one request of each command, and a stream of several
// Committed regression inputs (fuzz/corpus/<target>/) are added to these by CTest.
// Read before: fuzz/CMakeLists.txt. Read next: the fuzz_*.cpp targets.
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/rng.h"
#include "distributed/store/tcp_store_protocol.h"
#include "nn/serialize.h"

namespace ls = lockstep;
namespace fs = std::filesystem;
namespace wire = lockstep::distributed::wire;
using Bytes = std::vector<uint8_t>;

namespace {

void write(const fs::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("make_seeds: cannot write " + path.string());
}

Bytes read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

Bytes gzip(const Bytes& plain) {
  uLongf n = compressBound(static_cast<uLong>(plain.size())) + 32;
  Bytes out(n);
  z_stream z{};
  // windowBits 15 + 16: a gzip wrapper, as the dataset's .gz files have.
  if (deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("make_seeds: deflateInit2 failed");
  z.next_in = const_cast<Bytef*>(plain.data());
  z.avail_in = static_cast<uInt>(plain.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) throw std::runtime_error("make_seeds: deflate failed");
  return out;
}

Bytes idx(const std::vector<uint32_t>& sizes) {
  Bytes out = {0, 0, 0x08, static_cast<uint8_t>(sizes.size())};
  uint64_t numel = 1;
  for (uint32_t s : sizes) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(s >> shift));
    numel *= s;
  }
  for (uint64_t i = 0; i < numel; ++i) out.push_back(static_cast<uint8_t>(i * 37 + 11));
  return out;
}

void safetensors_seeds(const fs::path& dir, const fs::path& json_dir) {
  ls::manual_seed(0);
  std::map<std::string, std::map<std::string, ls::Tensor>> files;
  files["every_dtype"] = {
      {"f32", ls::randn({2, 3})},
      {"f64", ls::randn({2}, ls::kFloat64)},
      {"f16", ls::randn({3}).to(ls::kFloat16)},
      {"bf16", ls::randn({1, 2}).to(ls::kBFloat16)},
      {"i64", ls::tensor(std::vector<int64_t>{-1, 1LL << 40}, {2})},
      {"i32", ls::tensor(std::vector<int32_t>{7}, {1, 1})},
      {"u8", ls::tensor(std::vector<uint8_t>{0, 255}, {2})},
      {"bool", ls::tensor(std::vector<uint8_t>{1, 0, 1}, {3}).ne(0.0)},
  };
  files["scalar_and_empty"] = {{"s", ls::scalar_tensor(2.5)}, {"e", ls::zeros({0, 3})}};
  files["one"] = {{"layer.weight", ls::ones({1})}};
  files["none"] = {};
  for (const auto& [name, tensors] : files) {
    const fs::path path = dir / (name + ".safetensors");
    ls::nn::save_tensors(tensors, path.string(), {{"format", "pt"}, {"step", "3"}});
  }
  // Python's layout: no checksum, tensors not in name order, escapes, padding.
  const std::string header =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"z\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}, "
      "\"a\\u00e9\\n\" : {\"shape\":[2, 1],\"dtype\":\"F32\",\"data_offsets\":[8,16]},"
      "\"m\":{\"dtype\":\"BOOL\",\"shape\":[],\"data_offsets\":[16,17]}}       ";
  Bytes python(8);
  for (int i = 0; i < 8; ++i) python[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));
  python.insert(python.end(), header.begin(), header.end());
  for (int i = 0; i < 17; ++i) python.push_back(static_cast<uint8_t>(i == 16 ? 1 : i * 9));
  write(dir / "python_layout.safetensors", python);

  // The JSON target gets each file's header text.
  for (const auto& entry : fs::directory_iterator(dir)) {
    const Bytes bytes = read(entry.path());
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t{bytes[i]} << (8 * i);
    write(json_dir / (entry.path().stem().string() + ".json"), Bytes(bytes.begin() + 8, bytes.begin() + 8 + n));
  }
  write(json_dir / "escapes.json", Bytes{'[', '"', '\\', 'u', 'd', '8', '3', 'd', '\\', 'u', 'd', 'e',
                                         '0', '0', '\\', 't', '"', ',', '0', ',', '{', '}', ']'});
}

void idx_seeds(const fs::path& dir) {
  const Bytes images = idx({3, 4, 5});
  const Bytes labels = idx({6});
  write(dir / "images.idx", images);
  write(dir / "labels.idx", labels);
  write(dir / "images.idx.gz", gzip(images));
  write(dir / "labels.idx.gz", gzip(labels));
  write(dir / "empty.idx", idx({0, 28, 28}));
  write(dir / "two_dims.idx", idx({2, 3}));
}

void protocol_seeds(const fs::path& dir) {
  auto one = [](wire::Command c) { return wire::Encoder().u8(static_cast<uint8_t>(c)); };
  const Bytes value = {1, 2, 3};
  std::map<std::string, Bytes> seeds;
  seeds["validate"] = one(wire::Command::kValidate).u32(wire::kValidationMagic).buf;
  seeds["ping"] = one(wire::Command::kPing).u32(0x1234).buf;
  seeds["set"] = one(wire::Command::kSet).str("/rank0/addr").bytes(value).buf;
  seeds["get"] = one(wire::Command::kGet).str("/key").buf;
  seeds["add"] = one(wire::Command::kAdd).str("/barrier/0").u64(static_cast<uint64_t>(-1)).buf;
  seeds["compare_set"] = one(wire::Command::kCompareSet).str("/k").bytes(value).bytes(Bytes{9}).buf;
  seeds["wait"] = one(wire::Command::kWait).u64(2).str("/a").str("/bb").buf;
  seeds["cancel_wait"] = one(wire::Command::kCancelWait).buf;
  seeds["check"] = one(wire::Command::kCheck).u64(1).str("/a").buf;
  seeds["delete"] = one(wire::Command::kDelete).str("/a").buf;
  seeds["num_keys"] = one(wire::Command::kNumKeys).buf;
  seeds["append"] = one(wire::Command::kAppend).str("/a").bytes(value).buf;
  seeds["multi_get"] = one(wire::Command::kMultiGet).u64(2).str("/a").str("/b").buf;
  seeds["multi_set"] = one(wire::Command::kMultiSet).u64(1).str("/a").bytes(value).buf;
  Bytes stream;
  for (const char* name : {"validate", "ping", "set", "add", "wait", "cancel_wait", "num_keys", "get"})
    stream.insert(stream.end(), seeds[name].begin(), seeds[name].end());
  seeds["stream"] = stream;
  for (const auto& [name, bytes] : seeds) write(dir / (name + ".bin"), bytes);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR  (writes OUT_DIR/<target>/ seed files)\n", argv[0]);
    return 2;
  }
  try {
    const fs::path out = argv[1];
    for (const char* target : {"safetensors", "safetensors_json", "idx", "tcp_store_protocol"}) {
      fs::remove_all(out / target);
      fs::create_directories(out / target);
    }
    safetensors_seeds(out / "safetensors", out / "safetensors_json");
    idx_seeds(out / "idx");
    protocol_seeds(out / "tcp_store_protocol");
    for (const auto& entry : fs::directory_iterator(out))
      std::printf("make_seeds: %zu seeds in %s\n",
                  static_cast<size_t>(std::distance(fs::directory_iterator(entry.path()), {})),
                  entry.path().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
