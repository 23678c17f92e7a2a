// distributed/process_group/process_group_mpi.cpp — the MPI backend: the process-wide MPI
// thread, dtype/op mapping, and one task per collective.
// CUDA tensors travel through pinned host twins, as with Gloo (Note [Gloo with
// CUDA tensors], distributed/process_group/cuda/host_staging.h), on the MPI thread.
// Read before: distributed/process_group/process_group_mpi.h.
#include "distributed/process_group/process_group_mpi.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "core/factory.h"
#include "distributed/process_group/collective_check.h"
#include "distributed/process_group/host_staging_set.h"
#include "distributed/process_group/process_group_mpi_fingerprints.h"
#include "distributed/process_group/reduce_kernels.h"
#include "distributed/process_group/staged_operands.h"
#include "distributed/process_group/work_queue.h"

namespace lockstep::distributed {

struct ProcessGroupMPI::Comm {
  MPI_Comm comm = MPI_COMM_NULL;          // the collectives' data
  MPI_Comm fingerprints = MPI_COMM_NULL;  // their fingerprint exchanges only (Note [Fingerprints exchanged ahead over MPI])
};

namespace {

using detail::CollectiveKind;
using detail::Fingerprint;
using mpi_detail::mpi_check;

// § Note [The MPI thread yields while it waits]
// A blocking Open MPI collective polls its progress engine in a loop while it
// waits for a peer, and by default that loop never gives up the CPU. Under DDP
// the wait is long (rank 0's bucket is ready, rank 1's backward has not yet
// produced it) and the MPI thread shares the cores with this rank's backward,
// so it takes CPU from the very computation it waits for. Open MPI's
// mpi_yield_when_idle makes the loop call sched_yield: the backward keeps the
// core. Open MPI turns it on only when it sees more ranks than slots, and the
// MPI thread beside each rank's compute thread is an oversubscription no rank
// count shows; so ProcessGroupMPI sets OMPI_MCA_mpi_yield_when_idle=1 before
// MPI_Init unless the environment already names it (`mpirun --mca
// mpi_yield_when_idle 0` puts it there, and wins). Measured on 2 ranks x 1
// thread (ResNet50 fp32, bench_overlap --backend mpi; docs/results/evaluation.md,
// "2026-12-07 noon"): ddp/local 1.036 and 1.042 spinning, 1.027 and 1.026
// yielding, no longer behind no-overlap; bench_allreduce's per-call times from
// 10K to 10M floats unchanged. Other MPI libraries ignore the variable.
// ProcessGroupMPI::yields_when_idle() reads back what Open MPI applied (MPI_T).
// See Note [One MPI thread]. Constructed on first use; destroyed at exit, when
// its thread finalizes MPI (unless someone else initialized it).
detail::WorkQueue& mpi_thread() {
  static bool we_initialized = false;
  static detail::WorkQueue queue(
      /*threads=*/1,
      [] {
        int initialized = 0;
        MPI_Initialized(&initialized);
        if (initialized) return;
        setenv("OMPI_MCA_mpi_yield_when_idle", "1", /*overwrite=*/0);
        int provided = 0;
        mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
        we_initialized = true;
        LS_CHECK(provided >= MPI_THREAD_SERIALIZED, "ProcessGroupMPI: the MPI library provides thread "
                 "level ", provided, " but lockstep needs MPI_THREAD_SERIALIZED (all calls come from "
                 "one thread that is not the main thread)");
      },
      [] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (we_initialized && !finalized) MPI_Finalize();
      });
  return queue;
}

// User-defined MPI_Ops for f16/bf16: inout = in (op) inout, combined in f32.
template <ScalarType D, ReduceOp O>
void user_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  static const detail::ReduceFn fn = detail::reduce_function(D, O, "allreduce");
  fn(inout, in, inout, static_cast<size_t>(*len));
}

template <ScalarType D>
MPI_Op half_op(ReduceOp op) {
  static MPI_Op ops[5] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  const int i = static_cast<int>(op);
  if (ops[i] == MPI_OP_NULL) {  // only the MPI thread gets here: no race
    MPI_User_function* fn = nullptr;
    switch (op) {
      case ReduceOp::SUM:
      case ReduceOp::AVG: fn = &user_reduce<D, ReduceOp::SUM>; break;
      case ReduceOp::PRODUCT: fn = &user_reduce<D, ReduceOp::PRODUCT>; break;
      case ReduceOp::MAX: fn = &user_reduce<D, ReduceOp::MAX>; break;
      case ReduceOp::MIN: fn = &user_reduce<D, ReduceOp::MIN>; break;
    }
    mpi_check(MPI_Op_create(fn, /*commute=*/1, &ops[i]), "MPI_Op_create");
  }
  return ops[i];
}

// (MPI datatype, MPI op) for a reduction; call on the MPI thread.
std::pair<MPI_Datatype, MPI_Op> mpi_reduction(ScalarType dtype, ReduceOp op) {
  switch (dtype) {
    case kFloat16: return {MPI_UINT16_T, half_op<kFloat16>(op)};
    case kBFloat16: return {MPI_UINT16_T, half_op<kBFloat16>(op)};
    default: break;
  }
  MPI_Datatype type = dtype == kFloat32 ? MPI_FLOAT : dtype == kFloat64 ? MPI_DOUBLE : MPI_INT64_T;
  MPI_Op mop = op == ReduceOp::MAX ? MPI_MAX : op == ReduceOp::MIN ? MPI_MIN
             : op == ReduceOp::PRODUCT ? MPI_PROD : MPI_SUM;
  return {type, mop};
}

using Body = std::function<std::vector<Tensor>()>;

// host(): the tensor MPI moves (a CUDA tensor's pinned twin, or the tensor
// itself); staged(): the body bracketed by the copies in and back. The
// identity with CPU tensors.
using Staging = detail::HostStagingSet;
Body staged(Body body, const Staging& staging) {
  if (staging.empty()) return body;
  return [body = std::move(body), staging] {
    staging.before();
    std::vector<Tensor> out = body();
    staging.after();
    staging.report_devices(out);
    return out;
  };
}

int checked_count(int64_t n, const char* collective) {
  LS_CHECK(n <= INT_MAX, collective, ": ", n, " elements exceed MPI's int count; split the tensor");
  return static_cast<int>(n);
}

}  // namespace

struct ProcessGroupMPI::Pending {
  Fingerprint fingerprint;
  std::function<std::vector<Tensor>()> body;
};

bool ProcessGroupMPI::launched_by_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

std::optional<bool> ProcessGroupMPI::yields_when_idle() {
  std::optional<bool> yields;
  mpi_thread().run_and_wait([&] {
    int provided = 0, index = 0, count = 0;
    mpi_check(MPI_T_init_thread(MPI_THREAD_SERIALIZED, &provided), "MPI_T_init_thread");
    if (MPI_T_cvar_get_index("mpi_yield_when_idle", &index) == MPI_SUCCESS) {
      MPI_T_cvar_handle handle;
      mpi_check(MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count), "MPI_T_cvar_handle_alloc");
      int value = 0;  // a bool: Open MPI writes its first byte
      mpi_check(MPI_T_cvar_read(handle, &value), "MPI_T_cvar_read");
      MPI_T_cvar_handle_free(&handle);
      yields = (value & 0xff) != 0;
    }
    MPI_T_finalize();
  });
  return yields;
}

std::shared_ptr<ProcessGroupMPI> ProcessGroupMPI::create(Options options) {
  auto comm = std::make_unique<Comm>();
  int rank = 0, size = 0;
  mpi_thread().run_and_wait([&] {
    mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comm->comm), "MPI_Comm_dup");
    mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comm->fingerprints), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm->comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(comm->fingerprints, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm->comm, &rank);
    MPI_Comm_size(comm->comm, &size);
  });
  options.check_every_collective = detail::collective_checks_enabled(options.check_every_collective);
  return std::shared_ptr<ProcessGroupMPI>(new ProcessGroupMPI(std::move(comm), rank, size, options));
}

ProcessGroupMPI::ProcessGroupMPI(std::unique_ptr<Comm> comm, int rank, int size, Options options)
    : ProcessGroup(rank, size), comm_(std::move(comm)), options_(options),
      checks_(std::make_shared<mpi_detail::FingerprintChecks>(rank, size, comm_->fingerprints)) {}

ProcessGroupMPI::~ProcessGroupMPI() {
  // Queued collectives still reference the communicators: free them after them, on
  // the MPI thread, once the fingerprint exchange in flight (if any) is complete.
  std::shared_ptr<Comm> comm(comm_.release());
  mpi_thread().enqueue(std::make_shared<Work>("MPI_Comm_free"), [comm, checks = checks_] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return std::vector<Tensor>{};
    checks->finish();
    MPI_Comm_free(&comm->comm);
    MPI_Comm_free(&comm->fingerprints);
    return std::vector<Tensor>{};
  });
}

std::shared_ptr<Work> ProcessGroupMPI::enqueue(Pending pending, bool collective) {
  std::lock_guard<std::mutex> lock(issue_mutex_);
  pending.fingerprint.seq = collective ? next_seq_++ : next_p2p_seq_++;
  // See Note [Collective fingerprints]; recorded in issue order, #0, #1, ... without a gap.
  const bool check = collective && size_ > 1 && (pending.fingerprint.seq == 0 || options_.check_every_collective);
  if (check) checks_->record(pending.fingerprint);
  const std::string description = lockstep::detail::str(detail::describe(pending.fingerprint), " (mpi, rank ", rank_, ")");
  auto work = std::make_shared<Work>(description);
  mpi_thread().enqueue(work, [p = std::move(pending), check, checks = checks_, description] {
    try {
      if (check) {  // Note [Fingerprints exchanged ahead over MPI]
        checks->check(p.fingerprint.seq);
        checks->post_ahead();
      }
      return p.body();
    } catch (const std::exception& e) {
      throw Error(lockstep::detail::str(description, ": ", e.what()));
    }
  });
  return work;
}

std::shared_ptr<Work> ProcessGroupMPI::allreduce(Tensor& original, ReduceOp op) {
  Staging staging;
  Tensor tensor = staging.host(original, true, true, "allreduce");
  detail::check_tensor(tensor, "allreduce");
  detail::reduce_function(tensor.dtype(), op, "allreduce");  // rejects int32, uint8, bool
  const int count = checked_count(tensor.numel(), "allreduce");
  MPI_Comm comm = comm_->comm;
  Pending p{detail::make_fingerprint(0, CollectiveKind::ALLREDUCE, &tensor, static_cast<int>(op)), {}};
  p.body = [tensor, op, count, comm, size = size_] {
    auto [type, mop] = mpi_reduction(tensor.dtype(), op);
    if (count > 0) mpi_check(MPI_Allreduce(MPI_IN_PLACE, tensor.raw_data(), count, type, mop, comm), "MPI_Allreduce");
    if (op == ReduceOp::AVG) detail::divide_in_place(tensor.raw_data(), tensor.dtype(), count, size);
    return std::vector<Tensor>{tensor};
  };
  p.body = staged(std::move(p.body), staging);
  return enqueue(std::move(p));
}

std::shared_ptr<Work> ProcessGroupMPI::broadcast(Tensor& original, int root) {
  Staging staging;
  Tensor tensor = staging.host(original, true, true, "broadcast");
  detail::check_tensor(tensor, "broadcast");
  detail::check_rank(root, size_, "broadcast", "root");
  const int bytes = checked_count(static_cast<int64_t>(tensor.nbytes()), "broadcast");
  MPI_Comm comm = comm_->comm;
  Pending p{detail::make_fingerprint(0, CollectiveKind::BROADCAST, &tensor, -1, root), {}};
  p.body = [tensor, root, bytes, comm] {
    if (bytes > 0) mpi_check(MPI_Bcast(tensor.raw_data(), bytes, MPI_BYTE, root, comm), "MPI_Bcast");
    return std::vector<Tensor>{tensor};
  };
  p.body = staged(std::move(p.body), staging);
  return enqueue(std::move(p));
}

std::shared_ptr<Work> ProcessGroupMPI::reduce(Tensor& original, int root, ReduceOp op) {
  Staging staging;
  Tensor tensor = staging.host(original, true, true, "reduce");
  detail::check_tensor(tensor, "reduce");
  detail::check_rank(root, size_, "reduce", "root");
  detail::reduce_function(tensor.dtype(), op, "reduce");  // rejects int32, uint8, bool
  const int count = checked_count(tensor.numel(), "reduce");
  MPI_Comm comm = comm_->comm;
  Pending p{detail::make_fingerprint(0, CollectiveKind::REDUCE, &tensor, static_cast<int>(op), root), {}};
  p.body = [tensor, root, op, count, comm, rank = rank_, size = size_] {
    auto [type, mop] = mpi_reduction(tensor.dtype(), op);
    if (count > 0) {
      // The root reduces in place; the others only send (their tensor is left as it was).
      void* send = rank == root ? MPI_IN_PLACE : tensor.raw_data();
      void* recv = rank == root ? tensor.raw_data() : nullptr;
      mpi_check(MPI_Reduce(send, recv, count, type, mop, root, comm), "MPI_Reduce");
    }
    if (op == ReduceOp::AVG && rank == root) detail::divide_in_place(tensor.raw_data(), tensor.dtype(), count, size);
    return std::vector<Tensor>{tensor};
  };
  p.body = staged(std::move(p.body), staging);
  return enqueue(std::move(p));
}

std::shared_ptr<Work> ProcessGroupMPI::allgather(std::vector<Tensor>& device_outputs, const Tensor& original) {
  Staging staging;
  const detail::StagedGather ops = detail::stage_allgather(staging, device_outputs, original, size_);
  const Tensor& input = ops.input;
  const std::vector<Tensor>& outputs = ops.outputs;
  const int bytes = checked_count(static_cast<int64_t>(input.nbytes()) * size_, "allgather") / size_;
  MPI_Comm comm = comm_->comm;
  Pending p{detail::make_fingerprint(0, CollectiveKind::ALLGATHER, &input), {}};
  p.body = [outputs, input, bytes, comm, size = size_] {
    if (bytes > 0) {
      std::vector<uint8_t> flat(static_cast<size_t>(bytes) * size);
      mpi_check(MPI_Allgather(input.raw_data(), bytes, MPI_BYTE, flat.data(), bytes, MPI_BYTE, comm),
                "MPI_Allgather");
      for (int r = 0; r < size; ++r) std::memcpy(outputs[r].raw_data(), flat.data() + static_cast<size_t>(r) * bytes, bytes);
    }
    return outputs;
  };
  p.body = staged(std::move(p.body), staging);
  return enqueue(std::move(p));
}

std::shared_ptr<Work> ProcessGroupMPI::reduce_scatter(Tensor& device_output, std::vector<Tensor>& device_inputs,
                                                      ReduceOp op) {
  Staging staging;
  const detail::StagedScatter ops = detail::stage_reduce_scatter(staging, device_output, device_inputs, size_);
  const Tensor& output = ops.output;
  const std::vector<Tensor>& inputs = ops.inputs;
  detail::reduce_function(output.dtype(), op, "reduce_scatter");
  const int count = checked_count(output.numel() * size_, "reduce_scatter") / size_;
  MPI_Comm comm = comm_->comm;
  Pending p{detail::make_fingerprint(0, CollectiveKind::REDUCE_SCATTER, &output, static_cast<int>(op)), {}};
  p.body = [output, inputs, op, count, comm, size = size_] {
    const size_t bytes = output.nbytes();
    if (count > 0) {
      std::vector<uint8_t> flat(bytes * size);  // the inputs end to end, as MPI wants them
      for (int r = 0; r < size; ++r) std::memcpy(flat.data() + r * bytes, inputs[r].raw_data(), bytes);
      auto [type, mop] = mpi_reduction(output.dtype(), op);
      mpi_check(MPI_Reduce_scatter_block(flat.data(), output.raw_data(), count, type, mop, comm),
                "MPI_Reduce_scatter_block");
      if (op == ReduceOp::AVG) detail::divide_in_place(output.raw_data(), output.dtype(), count, size);
    }
    return std::vector<Tensor>{output};
  };
  p.body = staged(std::move(p.body), staging);
  return enqueue(std::move(p));
}

std::shared_ptr<Work> ProcessGroupMPI::barrier() {
  MPI_Comm comm = comm_->comm;
  Pending p{detail::make_fingerprint(0, CollectiveKind::BARRIER), {}};
  p.body = [comm] {
    mpi_check(MPI_Barrier(comm), "MPI_Barrier");
    return std::vector<Tensor>{};
  };
  return enqueue(std::move(p));
}

// Blocking MPI_Send / MPI_Recv on the MPI thread, in issue order (pair them like
// blocking MPI: one side sends first while the other receives first).
std::shared_ptr<Work> ProcessGroupMPI::send(const Tensor& original, int dst_rank, int tag) {
  Staging staging;
  const Tensor tensor = staging.host(original, true, false, "send");
  detail::check_tensor(tensor, "send");
  detail::check_rank(dst_rank, size_, "send", "dst_rank");
  const int bytes = checked_count(static_cast<int64_t>(tensor.nbytes()), "send");
  MPI_Comm comm = comm_->comm;
  Pending p{detail::make_fingerprint(0, CollectiveKind::SEND, &tensor), {}};
  p.body = [tensor, dst_rank, tag, bytes, comm] {
    mpi_check(MPI_Send(tensor.raw_data(), bytes, MPI_BYTE, dst_rank, tag, comm), "MPI_Send");
    return std::vector<Tensor>{tensor};
  };
  p.body = staged(std::move(p.body), staging);
  return enqueue(std::move(p), /*collective=*/false);
}

std::shared_ptr<Work> ProcessGroupMPI::recv(Tensor& original, int src_rank, int tag) {
  Staging staging;
  Tensor tensor = staging.host(original, false, true, "recv");
  detail::check_tensor(tensor, "recv");
  detail::check_rank(src_rank, size_, "recv", "src_rank");
  const int bytes = checked_count(static_cast<int64_t>(tensor.nbytes()), "recv");
  MPI_Comm comm = comm_->comm;
  Pending p{detail::make_fingerprint(0, CollectiveKind::RECV, &tensor), {}};
  p.body = [tensor, src_rank, tag, bytes, comm] {
    mpi_check(MPI_Recv(tensor.raw_data(), bytes, MPI_BYTE, src_rank, tag, comm, MPI_STATUS_IGNORE), "MPI_Recv");
    return std::vector<Tensor>{tensor};
  };
  p.body = staged(std::move(p.body), staging);
  return enqueue(std::move(p), /*collective=*/false);
}

}  // namespace lockstep::distributed
