// distributed/process_group/process_group_round_robin.h — one ProcessGroup made of K groups
// of the same ranks, each successive collective going to the next group in turn.
//
// The paper's Section 3.3 / Figure 12 knob: a single Gloo or MPI group runs its
// collectives one at a time on one connection set, so one slow collective
// delays the rest; K groups (K separate connection sets and worker threads)
// keep K collectives in flight and use more of the link. Every rank issues the
// same sequence, so the i-th collective goes to group i mod K on every rank and
// each group still sees its collectives in the same order everywhere.
// Read before: distributed/process_group/process_group.h. Read next: distributed/init.h.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "distributed/process_group/process_group.h"

namespace lockstep::distributed {

class ProcessGroupRoundRobin : public ProcessGroup {
 public:
  // All groups must have the same rank and size (they are the same processes).
  explicit ProcessGroupRoundRobin(std::vector<std::shared_ptr<ProcessGroup>> groups);

  std::string backend_name() const override { return "round_robin"; }
  const std::vector<std::shared_ptr<ProcessGroup>>& groups() const { return groups_; }

  std::shared_ptr<Work> allreduce(Tensor& tensor, ReduceOp op = ReduceOp::SUM) override;
  std::shared_ptr<Work> broadcast(Tensor& tensor, int root = 0) override;
  std::shared_ptr<Work> reduce(Tensor& tensor, int root, ReduceOp op = ReduceOp::SUM) override;
  std::shared_ptr<Work> allgather(std::vector<Tensor>& outputs, const Tensor& input) override;
  std::shared_ptr<Work> reduce_scatter(Tensor& output, std::vector<Tensor>& inputs,
                                       ReduceOp op = ReduceOp::SUM) override;
  std::shared_ptr<Work> barrier() override;
  // send/recv always use the first group: a pair's messages must not reorder.
  std::shared_ptr<Work> send(const Tensor& tensor, int dst_rank, int tag = 0) override;
  std::shared_ptr<Work> recv(Tensor& tensor, int src_rank, int tag = 0) override;

 private:
  ProcessGroup& next();  // the group for the next collective (applies timeout())

  std::vector<std::shared_ptr<ProcessGroup>> groups_;
  std::mutex mutex_;
  size_t next_ = 0;
};

}  // namespace lockstep::distributed
