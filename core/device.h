// core/device.h — where a tensor's memory lives: the CPU or a CUDA device.
// Read before: core/dtype.h. Read next: core/allocator.h.
#pragma once

#include <ostream>
#include <string>

namespace lockstep {

enum class DeviceType : uint8_t { CPU, CUDA };

// libtorch's spellings: ls::kCPU, ls::kCUDA, and a Device made from them
// (t.to(ls::kCPU), ls::Device(ls::kCUDA, 1)).
inline constexpr DeviceType kCPU = DeviceType::CPU;
inline constexpr DeviceType kCUDA = DeviceType::CUDA;

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceType type, int index = 0) : type(type), index(index) {}  // NOLINT: implicit, as libtorch's

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
  bool operator==(const Device&) const = default;
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

namespace cuda {
// True when lockstep was built with CUDA and a device is visible (core/cuda_info.cpp).
bool is_available();
int device_count();
}  // namespace cuda

}  // namespace lockstep
