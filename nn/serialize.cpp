// nn/serialize.cpp — the safetensors writer and reader (see Note [safetensors
// layout] in nn/serialize.h): writing through a temporary file, and one strict
// reader over a file or a buffer in memory; the checksum is nn/serialize_checksum.cpp.
// Read before: nn/serialize.h, nn/safetensors_json.h, nn/serialize_checksum.h.
#include "nn/serialize.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <locale>
#include <optional>
#include <sstream>
#include <vector>

#include "core/factory.h"
#include "core/shape.h"
#include "nn/safetensors_json.h"
#include "nn/serialize_checksum.h"

namespace lockstep::nn {

using namespace serialize_detail;  // the checksum helpers (nn/serialize_checksum.h)

static_assert(std::endian::native == std::endian::little,
              "nn/serialize.cpp writes tensor bytes as they are in memory; safetensors is "
              "little-endian, so a big-endian host would need byte swapping here");

namespace {

// Larger headers are refused outright (the reference implementation's limit).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

const char* safetensors_dtype(ScalarType t) {
  switch (t) {
    case kFloat32: return "F32";
    case kFloat64: return "F64";
    case kFloat16: return "F16";
    case kBFloat16: return "BF16";
    case kInt64: return "I64";
    case kInt32: return "I32";
    case kUInt8: return "U8";
    case kBool: return "BOOL";
  }
  throw Error("nn::save_tensors: unknown dtype");
}

bool parse_dtype(const std::string& s, ScalarType& out) {
  for (ScalarType t : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kUInt8, kBool}) {
    if (s == safetensors_dtype(t)) {
      out = t;
      return true;
    }
  }
  return false;
}

std::string errno_str() { return std::strerror(errno); }

// ---- writing ----

struct Entry {
  std::string name;
  Tensor data;  // contiguous, CPU
  uint64_t begin, end;
};

std::string build_header(const std::vector<Entry>& entries, const Metadata& metadata) {
  std::ostringstream h;
  h.imbue(std::locale::classic());  // plain digits whatever the global locale
  const char* sep = "";
  h << '{';
  if (!metadata.empty()) {
    h << "\"__metadata__\":{";
    for (const auto& [k, v] : metadata) {
      h << sep << detail::json_quote(k) << ':' << detail::json_quote(v);
      sep = ",";
    }
    h << '}';
    sep = ",";
  }
  for (const Entry& e : entries) {
    h << sep << detail::json_quote(e.name) << ":{\"dtype\":\"" << safetensors_dtype(e.data.dtype())
      << "\",\"shape\":[";
    for (int64_t d = 0; d < e.data.dim(); ++d) h << (d ? "," : "") << e.data.size(d);
    h << "],\"data_offsets\":[" << e.begin << ',' << e.end << "]}";
    sep = ",";
  }
  h << '}';
  std::string header = h.str();
  header.append((8 - header.size() % 8) % 8, ' ');  // the data then starts 8-byte aligned
  return header;
}

// Writes everything to `tmp`, flushed to disk; throws on any failure.
void write_file(const std::string& tmp, const std::string& header,
                const std::vector<Entry>& entries, const std::string& where) {
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  LS_CHECK(f != nullptr, where, ": cannot create '", tmp, "': ", errno_str());
  bool ok = true;
  auto put = [&](const void* p, size_t n) {
    if (ok && n > 0) ok = std::fwrite(p, 1, n, f) == n;
  };
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));
  put(length, 8);
  put(header.data(), header.size());
  for (const Entry& e : entries) put(e.data.raw_data(), e.data.nbytes());
  ok = ok && std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  const std::string err = ok ? "" : errno_str();
  ok = (std::fclose(f) == 0) && ok;
  LS_CHECK(ok, where, ": writing '", tmp, "' failed: ", err.empty() ? errno_str() : err);
}

// Makes a rename in `file`'s directory durable (Note [Atomic checkpoint
// writes]). Best effort: the file is complete either way, and some file systems
// cannot sync a directory.
void sync_directory_of(const std::filesystem::path& file) {
  const std::filesystem::path dir = file.has_parent_path() ? file.parent_path() : ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// What a path that is not a regular file is, for messages.
const char* kind_of(std::filesystem::file_type t) {
  using std::filesystem::file_type;
  switch (t) {
    case file_type::directory: return "a directory";
    case file_type::fifo: return "a FIFO (named pipe)";
    case file_type::character: return "a character device";
    case file_type::block: return "a block device";
    case file_type::socket: return "a socket";
    default: return "not a regular file";
  }
}

// The file a save replaces (Note [Atomic checkpoint writes]): `path`, or, when `path` is a
// symbolic link, the file it points to (through every link), so that the link stays and its
// target gets the new checkpoint. Refuses a target that exists and is not a regular file (a
// FIFO would be replaced by a file, and reading one blocks).
std::filesystem::path save_target(const std::string& path, const std::string& where) {
  namespace fs = std::filesystem;
  fs::path p(path);
  std::error_code ec;
  for (int links = 0; fs::is_symlink(fs::symlink_status(p, ec)); ++links) {
    LS_CHECK(links < 40, where, ": too many levels of symbolic links");
    const fs::path to = fs::read_symlink(p, ec);
    LS_CHECK(!ec, where, ": cannot read the symbolic link '", p.string(), "': ", ec.message());
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  const fs::file_status st = fs::status(p, ec);
  LS_CHECK(!fs::exists(st) || fs::is_regular_file(st), where, ": '", p.string(), "' is ", kind_of(st.type()),
           "; a checkpoint must be a regular file: name another path");
  return p;
}

// ---- reading ----

struct TensorInfo {
  std::string name;
  ScalarType dtype = kFloat32;
  IntList shape;
  uint64_t begin = 0, end = 0;
};

const detail::JsonValue* field(const detail::JsonValue& obj, const char* key) {
  for (const auto& [k, v] : obj.object)
    if (k == key) return &v;
  return nullptr;
}

TensorInfo parse_tensor_info(const std::string& name, const detail::JsonValue& v,
                             const std::string& where) {
  using Kind = detail::JsonValue::Kind;
  auto bad = [&](const std::string& what) {
    return Error(where + ": tensor '" + name + "': " + what);
  };
  if (v.kind != Kind::Object) throw bad(std::string("expected an object but got a ") + v.kind_name());
  for (const auto& [k, unused] : v.object)
    if (k != "dtype" && k != "shape" && k != "data_offsets") throw bad("unknown field \"" + k + "\"");
  const auto* dtype = field(v, "dtype");
  const auto* shape = field(v, "shape");
  const auto* offsets = field(v, "data_offsets");
  if (!dtype || !shape || !offsets) throw bad("needs the fields dtype, shape and data_offsets");

  TensorInfo info;
  info.name = name;
  if (dtype->kind != Kind::String) throw bad("dtype must be a string");
  if (!parse_dtype(dtype->string, info.dtype))
    throw bad("unsupported dtype \"" + dtype->string + "\"; lockstep reads F32, F64, F16, BF16, "
              "I64, I32, U8 and BOOL");
  if (shape->kind != Kind::Array) throw bad("shape must be an array");
  // numel * element size must equal end - begin, which is bounded by the file
  // size; checking each step against that bound keeps the product from overflowing.
  // The product of the non-zero dims (in bytes) is kept below 2^62, so neither
  // it nor a stride can overflow int64; a real tensor is far smaller.
  uint64_t bytes = element_size(info.dtype);
  bool has_zero_dim = false;
  for (const auto& d : shape->array) {
    if (d.kind != Kind::Integer) throw bad("shape entries must be non-negative integers");
    if (d.integer == 0) {
      has_zero_dim = true;
    } else if (bytes > (uint64_t{1} << 62) / d.integer) {
      throw bad("shape has more elements than any file can hold");
    } else {
      bytes *= d.integer;
    }
    info.shape.push_back(static_cast<int64_t>(d.integer));
  }
  if (has_zero_dim) bytes = 0;
  if (offsets->kind != Kind::Array || offsets->array.size() != 2 ||
      offsets->array[0].kind != Kind::Integer || offsets->array[1].kind != Kind::Integer)
    throw bad("data_offsets must be an array of two non-negative integers");
  info.begin = offsets->array[0].integer;
  info.end = offsets->array[1].integer;
  if (info.end < info.begin)
    throw bad("data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) +
              "] end before they begin");
  if (info.end - info.begin != bytes)
    throw bad("data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) +
              "] span " + std::to_string(info.end - info.begin) + " bytes but shape " +
              shape_str(info.shape) + " of " + dtype->string + " needs " + std::to_string(bytes));
  return info;
}

// Where the bytes of a safetensors file come from: a file on disk, or memory.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  // Reads exactly n bytes at `offset` (offset + n <= size(), checked by the caller).
  virtual void read(uint64_t offset, void* out, size_t n, const char* what) = 0;
};

class FileSource final : public ByteSource {
 public:
  FileSource(const std::string& path, const std::string& where) : where_(where) {
    // Checked before opening: opening a FIFO blocks until someone writes to it.
    std::error_code ec;
    const std::filesystem::file_status st = std::filesystem::status(path, ec);
    LS_CHECK(!std::filesystem::exists(st) || std::filesystem::is_regular_file(st), where, ": '", path, "' is ",
             kind_of(st.type()), ", not a checkpoint file");
    in_.open(path, std::ios::binary);
    LS_CHECK(in_.is_open(), where, ": cannot open the file: ", errno_str());
    size_ = std::filesystem::file_size(path, ec);
    LS_CHECK(!ec, where, ": cannot read the file size: ", ec.message());
  }
  uint64_t size() const override { return size_; }
  void read(uint64_t offset, void* out, size_t n, const char* what) override {
    in_.seekg(static_cast<std::streamoff>(offset));
    in_.read(static_cast<char*>(out), static_cast<std::streamsize>(n));
    LS_CHECK(in_.good(), where_, ": cannot read ", what, " (", n, " bytes at offset ", offset,
             "); the file is truncated or was changed while it was read");
  }

 private:
  std::ifstream in_;
  std::string where_;
  uint64_t size_ = 0;
};

class MemorySource final : public ByteSource {
 public:
  MemorySource(const void* data, size_t size) : data_(static_cast<const uint8_t*>(data)), size_(size) {}
  uint64_t size() const override { return size_; }
  void read(uint64_t offset, void* out, size_t n, const char*) override {
    if (n > 0) std::memcpy(out, data_ + offset, n);
  }

 private:
  const uint8_t* data_;
  size_t size_;
};

std::map<std::string, Tensor> read_safetensors(ByteSource& in, const std::string& where,
                                               Metadata* metadata) {
  const uint64_t file_size = in.size();
  LS_CHECK(file_size >= 8, where, ": the file has ", file_size, " bytes, fewer than the 8-byte "
           "header length; it is truncated or not a safetensors file");

  uint8_t length[8];
  in.read(0, length, 8, "the header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{length[i]} << (8 * i);
  LS_CHECK(n <= file_size - 8, where, ": the header length (", n, " bytes) is larger than the rest "
           "of the file (", file_size - 8, " bytes); the file is truncated or not a safetensors file");
  LS_CHECK(n <= kMaxHeaderBytes, where, ": the header length (", n, " bytes) exceeds the ",
           kMaxHeaderBytes, "-byte limit; the file is corrupt");
  LS_CHECK(n >= 2, where, ": the header (", n, " bytes) is too short to hold a JSON object");
  std::string header(n, '\0');
  in.read(8, header.data(), n, "the header");

  const detail::JsonValue root = detail::parse_json(header, where);
  LS_CHECK(root.kind == detail::JsonValue::Kind::Object, where, ": the header must be a JSON "
           "object but is a ", root.kind_name());

  std::vector<TensorInfo> infos;
  Metadata file_metadata;
  for (const auto& [name, value] : root.object) {
    if (name != "__metadata__") {
      infos.push_back(parse_tensor_info(name, value, where));
      continue;
    }
    LS_CHECK(value.kind == detail::JsonValue::Kind::Object, where, ": __metadata__ must be an "
             "object of strings");
    for (const auto& [k, v] : value.object) {
      LS_CHECK(v.kind == detail::JsonValue::Kind::String, where, ": __metadata__ value of \"", k,
               "\" must be a string but is a ", v.kind_name());
      file_metadata[k] = v.string;
    }
  }
  // See Note [Checkpoint checksum]: verified below, consumed here. The digits must sit
  // where save_tensors writes them, once, so that they can be read as 0s.
  std::optional<uint32_t> recorded_crc;
  size_t digits = 0;
  if (auto it = file_metadata.find(kChecksumKey); it != file_metadata.end()) {
    uint32_t crc = 0;
    LS_CHECK(parse_crc_hex(it->second, crc), where, ": __metadata__ \"", kChecksumKey, "\" is \"",
             it->second.substr(0, 32), "\", not 8 hex digits; the header is corrupt");
    digits = checksum_digits(header);
    LS_CHECK(digits != std::string::npos, where, ": the header's \"", kChecksumKey, "\" entry is not written "
             "the way lockstep writes it (the header was edited by hand); restore the file from a backup or write "
             "the checkpoint again");
    recorded_crc = crc;
    file_metadata.erase(it);
  }

  // The tensors must tile the data region exactly (no gaps or overlaps), as the
  // reference implementation requires; this also bounds every read by the file.
  const uint64_t data_size = file_size - 8 - n;
  std::vector<const TensorInfo*> order;
  for (const auto& info : infos) order.push_back(&info);
  std::sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) {
    if (a->begin != b->begin) return a->begin < b->begin;
    return a->end != b->end ? a->end < b->end : a->name < b->name;  // names are unique
  });
  uint64_t expected = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo* info : order) {
    LS_CHECK(info->end <= data_size, where, ": tensor '", info->name, "' data_offsets [",
             info->begin, ", ", info->end, "] run past the end of the data (", data_size,
             " bytes); the file is truncated");
    LS_CHECK(info->begin >= expected, where, ": tensor '", info->name, "' data_offsets [",
             info->begin, ", ", info->end, "] overlap tensor '", previous ? previous->name : "",
             "' ending at ", expected);
    LS_CHECK(info->begin == expected, where, ": tensor '", info->name, "' data_offsets [",
             info->begin, ", ", info->end, "] leave a gap after byte ", expected,
             " of the data; the file is corrupt");
    expected = info->end;
    previous = info;
  }
  LS_CHECK(expected == data_size, where, ": the tensors cover ", expected, " bytes but the file "
           "holds ", data_size, " bytes of data; the file is corrupt");

  // Read in data order, so the checksum runs over the data section front to back.
  std::map<std::string, Tensor> out;
  uint32_t crc = 0;
  for (const TensorInfo* info : order) {
    Tensor t = empty(info->shape, TensorOptions().dtype(info->dtype));
    if (t.nbytes() > 0) {
      const std::string what = "the data of tensor '" + info->name + "'";
      in.read(8 + n + info->begin, t.raw_data(), t.nbytes(), what.c_str());
      crc = crc_update(crc, t.raw_data(), t.nbytes());
    }
    if (info->dtype == kBool) {  // any non-zero byte is true; keep bools 0/1 in memory
      auto* p = static_cast<uint8_t*>(t.raw_data());
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = p[i] != 0;
    }
    out.emplace(info->name, std::move(t));
  }
  // A file written before the checksum covered the header records the data's CRC alone;
  // a changed file matches that by chance once in 2^32 (Note [Checkpoint checksum]).
  if (recorded_crc && *recorded_crc != crc) {
    const uint32_t whole = file_crc(header, digits, crc, data_size);
    LS_CHECK(*recorded_crc == whole, where, ": the file's CRC-32 (header, metadata and data) is ",
             crc_hex(whole), " but the header records ", crc_hex(*recorded_crc), " (\"", kChecksumKey,
             "\"); the file is corrupt or truncated-and-padded, or was modified after it was written (an "
             "edited metadata value such as \"epochs_done\" counts): restore it from a backup or write the "
             "checkpoint again");
  }
  if (metadata) *metadata = std::move(file_metadata);
  return out;
}

}  // namespace

void save_tensors(const std::map<std::string, Tensor>& tensors, const std::string& path,
                  const Metadata& metadata) {
  const std::string where = "ls::nn::save_tensors('" + path + "')";
  LS_CHECK(!metadata.count(kChecksumKey), where, ": the metadata key \"", kChecksumKey,
           "\" is reserved: save_tensors writes the file's checksum under it");
  std::vector<Entry> entries;
  uint64_t offset = 0;
  uint32_t crc = 0;
  for (const auto& [name, t] : tensors) {  // std::map: name order
    LS_CHECK(name != "__metadata__", where, ": '__metadata__' is reserved and cannot name a tensor");
    LS_CHECK(t.defined(), where, ": tensor '", name, "' is undefined");
    Tensor data = t.detach();
    if (!data.device().is_cpu()) data = data.to(Device::cpu());
    data = data.contiguous();
    const uint64_t n = data.nbytes();
    crc = crc_update(crc, data.raw_data(), n);
    entries.push_back({name, data, offset, offset + n});
    offset += n;
  }
  // See Note [Checkpoint checksum]: the digits are written as 0s, the file's CRC-32
  // computed over that header and the data, then put in their place.
  Metadata with_checksum = metadata;
  with_checksum[kChecksumKey] = "00000000";
  std::string header = build_header(entries, with_checksum);
  const size_t digits = checksum_digits(header);
  LS_CHECK(digits != std::string::npos, where, ": internal error: the checksum entry is missing from the header");
  header.replace(digits, 8, crc_hex(file_crc(header, digits, crc, offset)));

  // See Note [Atomic checkpoint writes]. The counter keeps two threads of one
  // process that save to the same path from sharing a temporary.
  static std::atomic<uint64_t> counter{0};
  const std::filesystem::path target = save_target(path, where);
  const std::string tmp =
      target.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  try {
    write_file(tmp, header, entries, where);
    std::error_code ec;
    std::filesystem::rename(tmp, target, ec);
    LS_CHECK(!ec, where, ": cannot rename '", tmp, "' to '", target.string(), "': ", ec.message());
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
  sync_directory_of(target);
}

std::map<std::string, Tensor> load_tensors(const std::string& path, Metadata* metadata) {
  const std::string where = "ls::nn::load_tensors('" + path + "')";
  FileSource in(path, where);
  return read_safetensors(in, where, metadata);
}

std::map<std::string, Tensor> load_tensors_from_bytes(const void* data, size_t size, Metadata* metadata) {
  const std::string where = "ls::nn::load_tensors_from_bytes(" + std::to_string(size) + " bytes)";
  LS_CHECK(data != nullptr || size == 0, where, ": data is null");
  MemorySource in(data, size);
  return read_safetensors(in, where, metadata);
}

void save(const Module& module, const std::string& path, const Metadata& metadata) {
  save_tensors(module.state_dict(), path, metadata);
}

void load(Module& module, const std::string& path, bool strict) {
  const std::map<std::string, Tensor> state = load_tensors(path);
  try {
    module.load_state_dict(state, strict);
  } catch (const Error& e) {
    throw Error("ls::nn::load('" + path + "'): " + e.what());
  }
}

}  // namespace lockstep::nn
