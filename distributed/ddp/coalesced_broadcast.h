// distributed/ddp/coalesced_broadcast.h — many tensors broadcast from one rank as a
// few flat collectives (PyTorch's _broadcast_coalesced).
//
// § Note [Coalesced buffer broadcast]
// DDP broadcasts the module's buffers from rank 0 before every synced forward
// (paper Section 3.2.1), and all parameters and buffers once at construction.
// ResNet50 has 159 buffers (each BatchNorm's running mean, running variance and
// batch counter), most of them a few hundred floats. One collective per buffer
// costs one queue hand-over and a chain of wake-ups on both ranks each (what
// that cost a forward: docs/results/distributed_choices.md). Instead the tensors are grouped by (device, dtype) with the
// bucket assignment (distributed/ddp/bucket_assignment.h, capped at
// kCoalescedBroadcastMB per flat tensor, as PyTorch caps at 250 MB); the source
// copies its values into one flat tensor per group, every rank broadcasts the
// flat tensors, and the other ranks copy the values back out. ResNet50's
// buffers become two collectives (float32 and int64). The group's collective
// sequence is the same on every rank, since the grouping depends only on the
// tensors' shapes, dtypes and devices, which DDP checked agree at construction.
// broadcast_each is the plain reference (one collective per tensor), kept for
// the test that compares the two (tests/distributed/test_ddp_buffers.cpp).
// Read before: distributed/ddp/bucket_assignment.h, distributed/process_group/process_group.h.
// Read next: distributed/ddp/distributed_data_parallel.cpp (its users).
#pragma once

#include <memory>
#include <vector>

#include "core/tensor.h"
#include "distributed/process_group/process_group.h"

namespace lockstep::distributed::detail {

// Largest flat tensor one coalesced broadcast moves (MiB); PyTorch's default is 250 MB.
inline constexpr double kCoalescedBroadcastMB = 256.0;

// Issues the broadcasts of `tensors` from `source` as flat collectives and
// returns their Works; when each has completed, call the returned finish() to
// copy the values into the tensors (on ranks other than `source`).
class CoalescedBroadcast {
 public:
  CoalescedBroadcast(ProcessGroup& pg, const std::vector<Tensor>& tensors, int source,
                     double cap_mb = kCoalescedBroadcastMB);
  const std::vector<std::shared_ptr<Work>>& works() const { return works_; }
  // After every Work completed: the received values into the tensors.
  void finish();

 private:
  struct Group {
    std::vector<size_t> members;  // into tensors_
    Tensor flat;                  // (sum of the members' numel), one dtype, one device
  };
  std::vector<Tensor> tensors_;
  std::vector<Group> groups_;
  std::vector<std::shared_ptr<Work>> works_;
  bool receives_;  // this rank is not the source
};

// Broadcasts every tensor from `source` and waits (`timeout`): coalesced.
void broadcast_coalesced(ProcessGroup& pg, const std::vector<Tensor>& tensors, int source,
                         std::chrono::milliseconds timeout);
// The reference: one broadcast per tensor (a strided one through a contiguous copy), then waits.
void broadcast_each(ProcessGroup& pg, const std::vector<Tensor>& tensors, int source,
                    std::chrono::milliseconds timeout);

}  // namespace lockstep::distributed::detail
