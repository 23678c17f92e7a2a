// core/cuda/cuda_allocator.h — the caching allocator for CUDA device memory.
//
// § Note [CUDA caching allocator]
// cudaMalloc and cudaFree are slow (cudaFree synchronises the whole device), and a
// training step allocates and frees the same sizes in the same order every
// iteration. So, like PyTorch's CUDA allocator (the idea, written from scratch):
//   - Sizes are rounded to a class: up to 1 MiB to a multiple of 512 B, above
//     that to a multiple of 2 MiB. A block is never split.
//   - A freed block is not returned to CUDA but kept on a free list of its
//     device and of the stream it was allocated on. Kernels on one stream run
//     in order, so the next allocation on that stream may reuse it at once: any
//     kernel that uses the new tensor is queued after every kernel that used the
//     old one. No synchronisation is needed.
//   - An allocation takes the smallest free block of its device and stream whose
//     size is in [class, class + class/8] (a large class: exactly its 2 MiB
//     multiple); otherwise it calls cudaMalloc. If that fails with
//     cudaErrorMemoryAllocation, every cached block of the device is released
//     (cudaFree) and the cudaMalloc retried once; if it fails again an ls::Error
//     names the request, the device, and the allocated and cached bytes.
//   - record_stream(t, s): a tensor used by kernels on another stream `s` (NCCL's
//     communication stream, say) must not be reused by the allocation stream
//     until `s` is done with it, since the two streams are not ordered. The block
//     remembers `s`; when it is freed, an event is recorded on every such stream
//     and the block joins the free list only once all those events have completed
//     (checked without blocking at each allocation and free; empty_cache and the
//     out-of-memory path wait for them).
// Stats (bytes): allocated (handed out now; peak since reset_peak_memory_stats),
// cached (held free in the cache), reserved (all memory obtained from cudaMalloc).
// Registered for DeviceType::CUDA in core/allocator.cpp on first use.
// Read before: core/allocator.h, core/cuda/cuda_context.h.
// Read next: core/cuda/cuda_native.h.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/allocator.h"
#include "core/tensor.h"

namespace lockstep::cuda {

struct MemoryStats {
  size_t allocated_bytes = 0;       // in tensors now
  size_t peak_allocated_bytes = 0;  // most at once since the last reset_peak_memory_stats
  size_t cached_bytes = 0;          // free blocks kept for reuse
  size_t reserved_bytes = 0;        // everything obtained from cudaMalloc
  int64_t num_cuda_mallocs = 0;     // cudaMalloc calls so far
  int64_t num_cache_hits = 0;       // allocations served from the cache
};

// The size class an allocation of `nbytes` is rounded to (see the Note).
size_t round_size(size_t nbytes);

class CUDACachingAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override;  // on the current device
  void deallocate(void* ptr, size_t nbytes) override;
  void* allocate_on(size_t nbytes, Device device) override;
  void deallocate_on(void* ptr, size_t nbytes, Device device) override;

  void record_stream(void* ptr, cudaStream_t stream);
  MemoryStats stats(int device);
  void reset_peak(int device);
  void empty_cache();  // every device
};

CUDACachingAllocator& caching_allocator();

// See Note [CUDA caching allocator]. `t` must be a CUDA tensor.
void record_stream(const Tensor& t, cudaStream_t stream);
MemoryStats memory_stats(int device);
void reset_peak_memory_stats(int device);
void empty_cache();

}  // namespace lockstep::cuda
