// core/cuda/cuda_allocator.cpp — the CUDA caching allocator
// (Note [CUDA caching allocator] in core/cuda/cuda_allocator.h).
// Read before: core/cuda/cuda_allocator.h.
#include "core/cuda/cuda_allocator.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/cuda/cuda_context.h"

namespace lockstep::cuda {

namespace {

constexpr size_t kSmallRound = 512;
constexpr size_t kSmallMax = size_t{1} << 20;   // 1 MiB
constexpr size_t kLargeRound = size_t{2} << 20;  // 2 MiB

struct Block {
  void* ptr = nullptr;
  size_t size = 0;  // the size class
  int device = 0;
  cudaStream_t stream = nullptr;          // the stream it was allocated on
  std::vector<cudaStream_t> used_on;      // other streams, from record_stream
  int pending_events = 0;                 // events still to complete after the free
};

// Free lists are ordered by (stream, size, address), so lower_bound finds the
// smallest block of a stream that is large enough.
struct BlockLess {
  bool operator()(const Block* a, const Block* b) const {
    const auto key = [](const Block* x) {
      return std::tuple(reinterpret_cast<uintptr_t>(x->stream), x->size,
                        reinterpret_cast<uintptr_t>(x->ptr));
    };
    return key(a) < key(b);
  }
};

struct DeviceBlocks {
  std::set<Block*, BlockLess> free_blocks;
  MemoryStats stats;
};

struct State {
  std::mutex mutex;
  std::map<int, DeviceBlocks> devices;
  std::unordered_map<void*, Block*> live;                     // allocated blocks by address
  std::vector<std::pair<cudaEvent_t, Block*>> pending;        // freed, waiting on events
  std::vector<cudaEvent_t> event_pool;
};

State& state() {
  static auto* s = new State();  // never destroyed: tensors in statics outlive it
  return *s;
}

std::string mib(size_t bytes) {
  return detail::str(static_cast<double>(bytes) / (1 << 20), " MiB");
}

void insert_free(State& s, Block* b) {
  DeviceBlocks& d = s.devices[b->device];
  d.free_blocks.insert(b);
  d.stats.cached_bytes += b->size;
}

// Moves freed blocks whose recorded-stream events have completed to their free
// list. With `wait`, blocks until every event has completed. Caller holds the lock.
void process_pending(State& s, bool wait) {
  std::vector<std::pair<cudaEvent_t, Block*>> still;
  for (auto& [event, block] : s.pending) {
    cudaError_t err = wait ? cudaEventSynchronize(event) : cudaEventQuery(event);
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      still.emplace_back(event, block);
      continue;
    }
    LS_CUDA_CHECK(err);
    s.event_pool.push_back(event);
    if (--block->pending_events == 0) insert_free(s, block);
  }
  s.pending = std::move(still);
}

// cudaFree's every cached block of `device` (every device when device < 0).
void release_cached(State& s, int device) {
  process_pending(s, /*wait=*/true);
  for (auto& [index, d] : s.devices) {
    if (device >= 0 && index != device) continue;
    DeviceGuard guard(Device::cuda(index));
    for (Block* b : d.free_blocks) {
      LS_CUDA_CHECK(cudaFree(b->ptr));
      d.stats.cached_bytes -= b->size;
      d.stats.reserved_bytes -= b->size;
      delete b;
    }
    d.free_blocks.clear();
  }
}

}  // namespace

size_t round_size(size_t nbytes) {
  if (nbytes <= kSmallMax) return std::max<size_t>(kSmallRound, (nbytes + kSmallRound - 1) / kSmallRound * kSmallRound);
  return (nbytes + kLargeRound - 1) / kLargeRound * kLargeRound;
}

void* CUDACachingAllocator::allocate(size_t nbytes) {
  return allocate_on(nbytes, Device::cuda(current_device()));
}

void CUDACachingAllocator::deallocate(void* ptr, size_t nbytes) {
  deallocate_on(ptr, nbytes, Device::cuda(current_device()));
}

void* CUDACachingAllocator::allocate_on(size_t nbytes, Device device) {
  if (nbytes == 0) return nullptr;
  check_device(device, "CUDA allocator");
  const int index = device.index;
  const size_t size = round_size(nbytes);
  const cudaStream_t stream = current_stream(index);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  process_pending(s, /*wait=*/false);
  DeviceBlocks& d = s.devices[index];

  Block key;
  key.stream = stream;
  key.size = size;
  Block* block = nullptr;
  auto it = d.free_blocks.lower_bound(&key);
  if (it != d.free_blocks.end() && (*it)->stream == stream && (*it)->size <= size + size / 8) {
    block = *it;
    d.free_blocks.erase(it);
    d.stats.cached_bytes -= block->size;
    ++d.stats.num_cache_hits;
  } else {
    DeviceGuard guard(device);
    void* ptr = nullptr;
    cudaError_t err = cudaMalloc(&ptr, size);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      release_cached(s, index);
      err = cudaMalloc(&ptr, size);
    }
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw Error(detail::str(
          "CUDA out of memory: allocating ", nbytes, " bytes (", mib(size), " rounded) on ",
          device.str(), " failed with ", mib(d.stats.allocated_bytes), " allocated in tensors and ",
          mib(d.stats.cached_bytes), " cached (already released and retried); use a smaller "
          "batch or model, or free tensors you no longer need"));
    }
    LS_CUDA_CHECK(err);
    block = new Block();
    block->ptr = ptr;
    block->size = size;
    block->device = index;
    block->stream = stream;
    d.stats.reserved_bytes += size;
    ++d.stats.num_cuda_mallocs;
  }
  block->used_on.clear();
  s.live.emplace(block->ptr, block);
  d.stats.allocated_bytes += block->size;
  d.stats.peak_allocated_bytes = std::max(d.stats.peak_allocated_bytes, d.stats.allocated_bytes);
  return block->ptr;
}

void CUDACachingAllocator::deallocate_on(void* ptr, size_t nbytes, Device device) {
  if (ptr == nullptr) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.live.find(ptr);
  LS_CHECK(it != s.live.end(), "CUDA allocator: freeing a ", nbytes, "-byte block on ",
           device.str(), " that it did not allocate (or freed twice); this is a lockstep bug");
  Block* block = it->second;
  s.live.erase(it);
  DeviceBlocks& d = s.devices[block->device];
  d.stats.allocated_bytes -= block->size;
  if (block->used_on.empty()) {
    insert_free(s, block);
    return;
  }
  // Note [CUDA caching allocator]: wait for every other stream that used it.
  // A free runs in destructors (possibly at exit, after the CUDA runtime has
  // shut down), so it must not throw: if CUDA fails here the block is leaked.
  try {
    DeviceGuard guard(Device::cuda(block->device));
    for (cudaStream_t other : block->used_on) {
      cudaEvent_t event = nullptr;
      if (!s.event_pool.empty()) {
        event = s.event_pool.back();
        s.event_pool.pop_back();
      } else {
        LS_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
      }
      LS_CUDA_CHECK(cudaEventRecord(event, other));
      ++block->pending_events;
      s.pending.emplace_back(event, block);
    }
    block->used_on.clear();
    process_pending(s, /*wait=*/false);
  } catch (const Error&) {
    (void)cudaGetLastError();
  }
}

void CUDACachingAllocator::record_stream(void* ptr, cudaStream_t stream) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.live.find(ptr);
  LS_CHECK(it != s.live.end(), "record_stream: the tensor's memory was not allocated by the CUDA "
                               "caching allocator (an external or already-freed buffer)");
  Block* block = it->second;
  if (stream == block->stream) return;  // its own stream is ordered already
  if (std::find(block->used_on.begin(), block->used_on.end(), stream) == block->used_on.end()) {
    block->used_on.push_back(stream);
  }
}

MemoryStats CUDACachingAllocator::stats(int device) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.devices[device].stats;
}

void CUDACachingAllocator::reset_peak(int device) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  MemoryStats& st = s.devices[device].stats;
  st.peak_allocated_bytes = st.allocated_bytes;
}

void CUDACachingAllocator::empty_cache() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  release_cached(s, -1);
}

CUDACachingAllocator& caching_allocator() {
  static auto* instance = new CUDACachingAllocator();  // never destroyed, like the CPU one
  return *instance;
}

void record_stream(const Tensor& t, cudaStream_t stream) {
  LS_CHECK(t.defined() && t.device().is_cuda(), "record_stream: expected a CUDA tensor but got ",
           t.defined() ? t.device().str() : std::string("an undefined tensor"));
  if (t.impl()->storage->data() == nullptr) return;  // empty tensor: no memory to protect
  caching_allocator().record_stream(t.impl()->storage->data(), stream);
}

MemoryStats memory_stats(int device) {
  check_device(Device::cuda(device), "memory_stats");
  return caching_allocator().stats(device);
}

void reset_peak_memory_stats(int device) {
  check_device(Device::cuda(device), "reset_peak_memory_stats");
  caching_allocator().reset_peak(device);
}

void empty_cache() { caching_allocator().empty_cache(); }

}  // namespace lockstep::cuda
