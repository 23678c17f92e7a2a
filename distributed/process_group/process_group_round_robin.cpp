// distributed/process_group/process_group_round_robin.cpp — dispatch over K groups in turn.
// Read before: distributed/process_group/process_group_round_robin.h.
#include "distributed/process_group/process_group_round_robin.h"

namespace lockstep::distributed {

ProcessGroupRoundRobin::ProcessGroupRoundRobin(std::vector<std::shared_ptr<ProcessGroup>> groups)
    : ProcessGroup(groups.empty() || !groups[0] ? 0 : groups[0]->rank(),
                   groups.empty() || !groups[0] ? 0 : groups[0]->size()),
      groups_(std::move(groups)) {
  LS_CHECK(!groups_.empty(), "ProcessGroupRoundRobin: needs at least one process group");
  for (size_t i = 0; i < groups_.size(); ++i) {
    LS_CHECK(groups_[i] != nullptr, "ProcessGroupRoundRobin: groups[", i, "] is null");
    LS_CHECK(groups_[i]->rank() == rank_ && groups_[i]->size() == size_, "ProcessGroupRoundRobin: groups[",
             i, "] is rank ", groups_[i]->rank(), " of ", groups_[i]->size(), " but groups[0] is rank ",
             rank_, " of ", size_, "; all groups must span the same processes");
  }
  timeout_ = groups_[0]->timeout();
}

ProcessGroup& ProcessGroupRoundRobin::next() {
  std::lock_guard<std::mutex> lock(mutex_);
  ProcessGroup& g = *groups_[next_];
  next_ = (next_ + 1) % groups_.size();
  g.set_timeout(timeout_);
  return g;
}

std::shared_ptr<Work> ProcessGroupRoundRobin::allreduce(Tensor& tensor, ReduceOp op) {
  return next().allreduce(tensor, op);
}

std::shared_ptr<Work> ProcessGroupRoundRobin::broadcast(Tensor& tensor, int root) {
  return next().broadcast(tensor, root);
}

std::shared_ptr<Work> ProcessGroupRoundRobin::reduce(Tensor& tensor, int root, ReduceOp op) {
  return next().reduce(tensor, root, op);
}

std::shared_ptr<Work> ProcessGroupRoundRobin::allgather(std::vector<Tensor>& outputs, const Tensor& input) {
  return next().allgather(outputs, input);
}

std::shared_ptr<Work> ProcessGroupRoundRobin::reduce_scatter(Tensor& output, std::vector<Tensor>& inputs,
                                                             ReduceOp op) {
  return next().reduce_scatter(output, inputs, op);
}

// Like PyTorch's round-robin group, a barrier is one more collective on the next
// group: it synchronizes the ranks, but does not wait for work queued on the
// other groups (wait on those Works for that).
std::shared_ptr<Work> ProcessGroupRoundRobin::barrier() { return next().barrier(); }

std::shared_ptr<Work> ProcessGroupRoundRobin::send(const Tensor& tensor, int dst_rank, int tag) {
  groups_[0]->set_timeout(timeout_);
  return groups_[0]->send(tensor, dst_rank, tag);
}

std::shared_ptr<Work> ProcessGroupRoundRobin::recv(Tensor& tensor, int src_rank, int tag) {
  groups_[0]->set_timeout(timeout_);
  return groups_[0]->recv(tensor, src_rank, tag);
}

}  // namespace lockstep::distributed
