// distributed/process_group/cuda/process_group_nccl.cpp — the NCCL backend: the unique-id
// rendezvous, the comm stream, and each collective as one launch: stage CPU
// operands, order the comm stream after the compute stream, call NCCL, record
// the end event, hand the Work to the watchdog.
// Read before: distributed/process_group/cuda/process_group_nccl.h (Note [NCCL stream
// isolation], Note [NCCL host tensors]), process_group_nccl_work.h.
#include "distributed/process_group/cuda/process_group_nccl.h"

#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <functional>

#include "core/cuda/cuda_allocator.h"
#include "core/cuda/cuda_context.h"
#include "core/native/native.h"
#include "distributed/process_group/collective_check.h"
#include "distributed/process_group/cuda/process_group_nccl_work.h"
#include "distributed/process_group/process_group_gloo.h"
#include "distributed/store/prefix_store.h"

namespace lockstep::distributed {

using detail::CollectiveKind;
using detail::Fingerprint;
using detail::WorkNCCL;

namespace {

constexpr const char* kIdKey = "nccl/unique_id";

void nccl_check(ncclResult_t rc, const char* call, const std::string& where, ncclComm_t comm = nullptr) {
  if (rc == ncclSuccess) return;
  const char* last = comm != nullptr ? ncclGetLastError(comm) : ncclGetLastError(nullptr);
  throw Error(lockstep::detail::str("nccl ", where, ": ", call, " failed: ", ncclGetErrorString(rc),
                                    last != nullptr && *last ? lockstep::detail::str(" (", last, ")") : std::string(),
                                    "; check that every rank runs the same collectives and that each rank "
                                    "has its own GPU (NCCL_DEBUG=WARN prints NCCL's view)"));
}

// The NCCL type of a dtype; reductions reject bool (a byte for moving only).
ncclDataType_t nccl_type(ScalarType dtype, bool reduction, const char* collective) {
  switch (dtype) {
    case kFloat32: return ncclFloat32;
    case kFloat64: return ncclFloat64;
    case kFloat16: return ncclFloat16;
    case kBFloat16: return ncclBfloat16;
    case kInt64: return ncclInt64;
    case kInt32: return ncclInt32;
    case kUInt8: return ncclUint8;
    case kBool:
      LS_CHECK(!reduction, collective, ": NCCL cannot reduce bool tensors; convert to uint8 or int32 first");
      return ncclUint8;
  }
  throw Error(lockstep::detail::str(collective, ": dtype ", dtype_name(dtype), " is not supported by NCCL"));
}

ncclRedOp_t nccl_op(ReduceOp op, ScalarType dtype, const char* collective) {
  switch (op) {
    case ReduceOp::SUM: return ncclSum;
    case ReduceOp::PRODUCT: return ncclProd;
    case ReduceOp::MAX: return ncclMax;
    case ReduceOp::MIN: return ncclMin;
    case ReduceOp::AVG:
      LS_CHECK(is_floating_point(dtype), collective, ": ReduceOp::AVG needs a floating-point tensor, got ",
               dtype_name(dtype), "; use SUM and divide");
      return ncclAvg;
  }
  throw Error(lockstep::detail::str(collective, ": unknown reduce op"));
}

// The device for a group: the option, else the calling thread's current one.
int pick_device(int requested) {
  const int count = cuda::device_count();
  LS_CHECK(count > 0, "ProcessGroupNCCL: no CUDA device is visible (ls::cuda::device_count() == 0); "
           "use the \"gloo\" backend on a machine without GPUs");
  const int device = requested >= 0 ? requested : cuda::current_device();
  LS_CHECK(device < count, "ProcessGroupNCCL: device ", device, " does not exist (", count,
           " visible); pass Options::device in [0, ", count - 1, "] or set CUDA_VISIBLE_DEVICES");
  return device;
}

}  // namespace

// One collective's operands and their device twins (Note [NCCL host tensors]).
struct ProcessGroupNCCL::Launch {
  struct Operand {
    Tensor tensor;        // as given: on the group's device, or on the CPU
    Tensor device;        // what NCCL reads/writes: `tensor` itself, or device scratch
    void* pinned = nullptr;
    bool in = false, out = false;
  };
  std::vector<Operand> operands;
  void add(const Tensor& t, bool in, bool out) { operands.push_back({t, Tensor(), nullptr, in, out}); }
};

ProcessGroupNCCL::ProcessGroupNCCL(std::shared_ptr<Store> store, int rank, int size, Options options)
    : ProcessGroup(rank, size), options_(options) {
  LS_CHECK(store != nullptr, "ProcessGroupNCCL: store is null");
  LS_CHECK(size >= 1 && rank >= 0 && rank < size, "ProcessGroupNCCL: rank ", rank, " is out of range for world size ",
           size);
  timeout_ = options_.timeout;
  device_ = pick_device(options_.device);
  options_.check_every_collective = detail::collective_checks_enabled(options_.check_every_collective);
  cuda::DeviceGuard guard(Device::cuda(device_));

  // Rank 0 makes the id; everyone else reads it from the store, under a key
  // numbered per group made on this store: each rank adds 1 to a counter, so
  // the k-th group's `size` additions give k on every rank (a group's id is
  // read by all its ranks before its init completes, hence before any rank
  // can start the next group) and a later group never reads a stale id.
  const int64_t generation = (store->add("nccl/groups", 1) - 1) / size;
  const std::string id_key = lockstep::detail::str(kIdKey, "/", generation);
  ncclUniqueId id;
  static_assert(sizeof(id.internal) == NCCL_UNIQUE_ID_BYTES, "ncclUniqueId is 128 raw bytes");
  if (rank == 0) {
    nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId", "rendezvous (rank 0)");
    store->set(id_key, Bytes(reinterpret_cast<uint8_t*>(id.internal),
                             reinterpret_cast<uint8_t*>(id.internal) + NCCL_UNIQUE_ID_BYTES));
  } else {
    try {
      store->wait({id_key}, options_.timeout);
    } catch (const std::exception& e) {
      throw Error(lockstep::detail::str("ProcessGroupNCCL: rank ", rank, " of ", size, " did not receive rank 0's "
                                        "NCCL unique id within ", options_.timeout.count(), " ms: ", e.what(),
                                        "; check that rank 0 started and created its group with \"nccl\" too"));
    }
    const Bytes bytes = store->get(id_key);
    LS_CHECK(bytes.size() == NCCL_UNIQUE_ID_BYTES, "ProcessGroupNCCL: the store's ", id_key, " holds ", bytes.size(),
             " bytes, not the ", NCCL_UNIQUE_ID_BYTES, " of an NCCL unique id; another program uses this store key");
    std::memcpy(id.internal, bytes.data(), NCCL_UNIQUE_ID_BYTES);
  }

  comm_ = std::make_shared<detail::NCCLComm>();
  comm_->device = device_;
  comm_->rank = rank;
  comm_->size = size;
  ncclComm_t comm = nullptr;
  nccl_check(ncclCommInitRank(&comm, size, id, rank), "ncclCommInitRank",
             lockstep::detail::str("rendezvous (rank ", rank, " of ", size, ", device ", device_, ")"));
  comm_->comm = comm;
  // Non-blocking w.r.t. the legacy default stream, like the compute stream.
  LS_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
  if (size > 1) {  // Note [NCCL collective checks]
    ProcessGroupGloo::Options host;
    host.timeout = options_.timeout;
    if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && *addr) host.master_addr = addr;
    host.threads = 1;
    host.check_every_collective = false;
    check_group_ = std::make_shared<ProcessGroupGloo>(
        std::make_shared<PrefixStore>(lockstep::detail::str("nccl/checks/", generation), store), rank, size, host);
  }
  store_ = std::move(store);
  watchdog_ = std::make_unique<detail::NCCLWatchdog>(comm_, options_.watchdog_interval);
}

ProcessGroupNCCL::~ProcessGroupNCCL() {
  try {
    if (watchdog_) watchdog_->drain(timeout_);
  } catch (...) {
    // Teardown is best effort; the abort above already failed pending Works.
  }
  watchdog_.reset();
  if (comm_) comm_->destroy();
  if (comm_stream_ != nullptr) cudaStreamDestroy(comm_stream_);
}

std::string ProcessGroupNCCL::broken() const { return comm_->failure(); }

void ProcessGroupNCCL::check_usable(const std::string& what) const {
  const std::string failure = comm_->failure();
  LS_CHECK(failure.empty(), "nccl ", what, ": the process group is unusable after an earlier failure: ", failure);
}

// Stage, order, call, record (Note [NCCL stream isolation]). `body` makes the
// NCCL calls on the device twins of the operands, in operand order.
std::shared_ptr<Work> ProcessGroupNCCL::run(Fingerprint fingerprint, bool collective, Launch launch,
                                            const std::function<void(std::vector<Tensor>&)>& body,
                                            std::vector<Tensor> result) {
  std::lock_guard<std::mutex> lock(issue_mutex_);
  fingerprint.seq = collective ? next_seq_++ : next_p2p_seq_++;
  const std::string description =
      lockstep::detail::str(detail::describe(fingerprint), " (nccl, rank ", rank_, ", device ", device_, ")");
  check_usable(description);
  if (check_group_ != nullptr && collective && (fingerprint.seq == 0 || options_.check_every_collective)) {
    detail::check_across_ranks(*check_group_, fingerprint, "nccl");
  }
  return launch_locked(description, std::move(launch), body, std::move(result));
}

std::shared_ptr<Work> ProcessGroupNCCL::launch_locked(const std::string& description, Launch launch,
                                                      const std::function<void(std::vector<Tensor>&)>& body,
                                                      std::vector<Tensor> result) {
  cuda::DeviceGuard guard(Device::cuda(device_));
  auto work = std::make_shared<WorkNCCL>(description, comm_, timeout_);
  // 1. Device twins, allocated before the compute-stream event so any earlier
  //    use of their blocks on the compute stream is ordered before the comm stream.
  std::vector<Tensor> devices;
  for (auto& op : launch.operands) {
    if (op.tensor.device().is_cuda()) {
      op.device = op.tensor;
    } else {
      op.device = native::empty(op.tensor.sizes(), op.tensor.dtype(), Device::cuda(device_));
      op.pinned = work->pinned(op.tensor.nbytes());
      if (op.in) std::memcpy(op.pinned, op.tensor.raw_data(), op.tensor.nbytes());
    }
    devices.push_back(op.device);
  }
  // 2. The comm stream waits for what the compute stream queued so far.
  LS_CUDA_CHECK(cudaEventRecord(work->start_event(), cuda::current_stream(device_)));
  LS_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, work->start_event(), 0));
  for (const auto& op : launch.operands) {
    if (op.pinned != nullptr && op.in && op.tensor.nbytes() > 0) {
      LS_CUDA_CHECK(cudaMemcpyAsync(op.device.raw_data(), op.pinned, op.tensor.nbytes(), cudaMemcpyHostToDevice,
                                    comm_stream_));
    }
  }
  // 3. NCCL on the comm stream. A failed call may leave the ranks out of step
  //    (some enqueued it, some did not): the group is broken from here on.
  try {
    body(devices);
  } catch (const std::exception& e) {
    comm_->abort(e.what());
    throw;
  }
  for (const auto& op : launch.operands) {
    if (op.pinned != nullptr && op.out) {
      if (op.tensor.nbytes() > 0) {
        LS_CUDA_CHECK(cudaMemcpyAsync(op.pinned, op.device.raw_data(), op.tensor.nbytes(), cudaMemcpyDeviceToHost,
                                      comm_stream_));
      }
      work->add_host_output(op.tensor, op.pinned, op.tensor.nbytes());
    }
  }
  // 4. End event, allocator bookkeeping, keep-alive, watchdog.
  LS_CUDA_CHECK(cudaEventRecord(work->end_event(), comm_stream_));
  for (const auto& op : launch.operands) {
    if (op.device.numel() > 0) cuda::record_stream(op.device, comm_stream_);
    work->keep_alive(op.device);
  }
  work->set_result(std::move(result));
  work->mark_launched();
  watchdog_->add(work);
  return work;
}

namespace {

void check_operand(const Tensor& t, int device, const char* collective, const char* what) {
  LS_CHECK(t.defined(), collective, ": ", what, " is undefined; pass an allocated tensor");
  LS_CHECK(t.device().is_cpu() || (t.device().is_cuda() && t.device().index == device), collective, ": ", what,
           " is on ", t.device(), " but this NCCL process group drives cuda:", device,
           "; move it there with .to(ls::Device::cuda(", device, "))");
  LS_CHECK(t.is_contiguous(), collective, ": ", what, " with shape ", t.shape_str(),
           " is not contiguous; pass t.contiguous() (and copy the result back if needed)");
}

}  // namespace

std::shared_ptr<Work> ProcessGroupNCCL::allreduce(Tensor& tensor, ReduceOp op) {
  check_operand(tensor, device_, "allreduce", "tensor");
  const ncclDataType_t type = nccl_type(tensor.dtype(), true, "allreduce");
  const ncclRedOp_t nop = nccl_op(op, tensor.dtype(), "allreduce");
  Launch launch;
  launch.add(tensor, true, true);
  const size_t count = static_cast<size_t>(tensor.numel());
  return run(detail::make_fingerprint(0, CollectiveKind::ALLREDUCE, &tensor, static_cast<int>(op)), true,
             std::move(launch), [&](std::vector<Tensor>& d) {
               if (count == 0) return;
               nccl_check(ncclAllReduce(d[0].raw_data(), d[0].raw_data(), count, type, nop, comm_->comm, comm_stream_),
                          "ncclAllReduce", "allreduce", comm_->comm);
             }, {tensor});
}

std::shared_ptr<Work> ProcessGroupNCCL::broadcast(Tensor& tensor, int root) {
  check_operand(tensor, device_, "broadcast", "tensor");
  detail::check_rank(root, size_, "broadcast", "root");
  const ncclDataType_t type = nccl_type(tensor.dtype(), false, "broadcast");
  Launch launch;
  launch.add(tensor, true, true);
  const size_t count = static_cast<size_t>(tensor.numel());
  return run(detail::make_fingerprint(0, CollectiveKind::BROADCAST, &tensor, -1, root), true, std::move(launch),
             [&](std::vector<Tensor>& d) {
               if (count == 0) return;
               nccl_check(ncclBroadcast(d[0].raw_data(), d[0].raw_data(), count, type, root, comm_->comm, comm_stream_),
                          "ncclBroadcast", "broadcast", comm_->comm);
             }, {tensor});
}

std::shared_ptr<Work> ProcessGroupNCCL::reduce(Tensor& tensor, int root, ReduceOp op) {
  check_operand(tensor, device_, "reduce", "tensor");
  detail::check_rank(root, size_, "reduce", "root");
  const ncclDataType_t type = nccl_type(tensor.dtype(), true, "reduce");
  const ncclRedOp_t nop = nccl_op(op, tensor.dtype(), "reduce");
  Launch launch;
  launch.add(tensor, true, true);
  const size_t count = static_cast<size_t>(tensor.numel());
  return run(detail::make_fingerprint(0, CollectiveKind::REDUCE, &tensor, static_cast<int>(op), root), true,
             std::move(launch), [&](std::vector<Tensor>& d) {
               if (count == 0) return;
               nccl_check(ncclReduce(d[0].raw_data(), d[0].raw_data(), count, type, nop, root, comm_->comm,
                                     comm_stream_),
                          "ncclReduce", "reduce", comm_->comm);
             }, {tensor});
}

// One grouped broadcast per rank straight into outputs[r] (no flat buffer to unpack).
std::shared_ptr<Work> ProcessGroupNCCL::allgather(std::vector<Tensor>& outputs, const Tensor& input) {
  check_operand(input, device_, "allgather", "input");
  const ncclDataType_t type = nccl_type(input.dtype(), false, "allgather");
  if (outputs.empty()) {
    for (int r = 0; r < size_; ++r) outputs.push_back(native::empty(input.sizes(), input.dtype(), input.device()));
  }
  LS_CHECK(static_cast<int>(outputs.size()) == size_, "allgather: outputs holds ", outputs.size(),
           " tensors but the group has ", size_, " ranks; pass an empty vector or one tensor per rank");
  Launch launch;
  launch.add(input, true, false);
  for (int r = 0; r < size_; ++r) {
    check_operand(outputs[r], device_, "allgather", "outputs[r]");
    LS_CHECK(outputs[r].dtype() == input.dtype() && outputs[r].numel() == input.numel(), "allgather: outputs[", r,
             "] is ", dtype_name(outputs[r].dtype()), " ", outputs[r].shape_str(), " but input is ",
             dtype_name(input.dtype()), " ", input.shape_str(), "; every output must match the input's dtype and "
             "number of elements");
    launch.add(outputs[r], false, true);
  }
  const size_t count = static_cast<size_t>(input.numel());
  return run(detail::make_fingerprint(0, CollectiveKind::ALLGATHER, &input), true, std::move(launch),
             [&](std::vector<Tensor>& d) {
               if (count == 0) return;
               nccl_check(ncclGroupStart(), "ncclGroupStart", "allgather", comm_->comm);
               for (int r = 0; r < size_; ++r) {
                 // Only root r's send buffer is read; the others pass theirs anyway.
                 nccl_check(ncclBroadcast(d[0].raw_data(), d[1 + r].raw_data(), count, type, r, comm_->comm, comm_stream_),
                            "ncclBroadcast", "allgather", comm_->comm);
               }
               nccl_check(ncclGroupEnd(), "ncclGroupEnd", "allgather", comm_->comm);
             }, outputs);
}

// One grouped reduce per rank: rank r's block of every input lands in r's output.
std::shared_ptr<Work> ProcessGroupNCCL::reduce_scatter(Tensor& output, std::vector<Tensor>& inputs, ReduceOp op) {
  check_operand(output, device_, "reduce_scatter", "output");
  const ncclDataType_t type = nccl_type(output.dtype(), true, "reduce_scatter");
  const ncclRedOp_t nop = nccl_op(op, output.dtype(), "reduce_scatter");
  LS_CHECK(static_cast<int>(inputs.size()) == size_, "reduce_scatter: inputs holds ", inputs.size(),
           " tensors but the group has ", size_, " ranks; pass one tensor per rank");
  Launch launch;
  launch.add(output, false, true);
  for (int r = 0; r < size_; ++r) {
    check_operand(inputs[r], device_, "reduce_scatter", "inputs[r]");
    LS_CHECK(inputs[r].dtype() == output.dtype() && inputs[r].numel() == output.numel(), "reduce_scatter: inputs[",
             r, "] is ", dtype_name(inputs[r].dtype()), " ", inputs[r].shape_str(), " but output is ",
             dtype_name(output.dtype()), " ", output.shape_str(), "; every input must match the output's dtype "
             "and number of elements");
    launch.add(inputs[r], true, false);
  }
  const size_t count = static_cast<size_t>(output.numel());
  return run(detail::make_fingerprint(0, CollectiveKind::REDUCE_SCATTER, &output, static_cast<int>(op)), true,
             std::move(launch), [&](std::vector<Tensor>& d) {
               if (count == 0) return;
               nccl_check(ncclGroupStart(), "ncclGroupStart", "reduce_scatter", comm_->comm);
               for (int r = 0; r < size_; ++r) {
                 nccl_check(ncclReduce(d[1 + r].raw_data(), d[0].raw_data(), count, type, nop, r, comm_->comm,
                                       comm_stream_),
                            "ncclReduce", "reduce_scatter", comm_->comm);
               }
               nccl_check(ncclGroupEnd(), "ncclGroupEnd", "reduce_scatter", comm_->comm);
             }, {output});
}

// A one-element CPU allreduce: its Work's wait() blocks the host (Note [NCCL host tensors]).
std::shared_ptr<Work> ProcessGroupNCCL::barrier() {
  Tensor token = native::empty({1}, kFloat32);  // (1)
  native::fill_(token, 0.0);
  Launch launch;
  launch.add(token, true, true);
  return run(detail::make_fingerprint(0, CollectiveKind::BARRIER), true, std::move(launch),
             [&](std::vector<Tensor>& d) {
               nccl_check(ncclAllReduce(d[0].raw_data(), d[0].raw_data(), 1, ncclFloat32, ncclSum, comm_->comm,
                                        comm_stream_),
                          "ncclAllReduce", "barrier", comm_->comm);
             }, {});
}

std::shared_ptr<Work> ProcessGroupNCCL::send(const Tensor& tensor, int dst_rank, int tag) {
  (void)tag;  // NCCL pairs sends and receives by call order (see the header)
  check_operand(tensor, device_, "send", "tensor");
  detail::check_rank(dst_rank, size_, "send", "dst_rank");
  LS_CHECK(dst_rank != rank_, "send: rank ", rank_, " cannot send to itself");
  const ncclDataType_t type = nccl_type(tensor.dtype(), false, "send");
  Launch launch;
  launch.add(tensor, true, false);
  const size_t count = static_cast<size_t>(tensor.numel());
  return run(detail::make_fingerprint(0, CollectiveKind::SEND, &tensor), false, std::move(launch),
             [&](std::vector<Tensor>& d) {
               nccl_check(ncclSend(d[0].raw_data(), count, type, dst_rank, comm_->comm, comm_stream_), "ncclSend",
                          "send", comm_->comm);
             }, {tensor});
}

std::shared_ptr<Work> ProcessGroupNCCL::recv(Tensor& tensor, int src_rank, int tag) {
  (void)tag;
  check_operand(tensor, device_, "recv", "tensor");
  detail::check_rank(src_rank, size_, "recv", "src_rank");
  LS_CHECK(src_rank != rank_, "recv: rank ", rank_, " cannot receive from itself");
  const ncclDataType_t type = nccl_type(tensor.dtype(), false, "recv");
  Launch launch;
  launch.add(tensor, false, true);
  const size_t count = static_cast<size_t>(tensor.numel());
  return run(detail::make_fingerprint(0, CollectiveKind::RECV, &tensor), false, std::move(launch),
             [&](std::vector<Tensor>& d) {
               nccl_check(ncclRecv(d[0].raw_data(), count, type, src_rank, comm_->comm, comm_stream_), "ncclRecv",
                          "recv", comm_->comm);
             }, {tensor});
}

}  // namespace lockstep::distributed
