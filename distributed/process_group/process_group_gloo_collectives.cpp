// distributed/process_group/process_group_gloo_collectives.cpp — the Gloo backend's
// collectives: each public call checks its arguments and queues a Pending whose
// body runs the Gloo algorithm on the worker thread (allreduce in chunks,
// broadcast, reduce, allgather, reduce_scatter, barrier, send/recv). Every Gloo call
// goes through gloo_detail::call_gloo with its options and buffers declared
// before it (Note [Gloo buffers after a failure]). CUDA tensors travel through
// pinned host twins (Note [Gloo with CUDA tensors], distributed/process_group/cuda/host_staging.h).
// Read before: distributed/process_group/process_group_gloo.cpp.
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/reduce.h>
#include <gloo/types.h>

#include "core/factory.h"
#include "core/from_blob.h"
#include "distributed/process_group/process_group_gloo_pending.h"
#include "distributed/process_group/host_staging_set.h"
#include "distributed/process_group/reduce_kernels.h"
#include "distributed/process_group/shm/shm_channel.h"
#include "distributed/process_group/staged_operands.h"

namespace lockstep::distributed {

using detail::CollectiveKind;
using detail::check_scatter_inputs;
using detail::prepare_gather_outputs;

namespace {

using Body = std::function<std::vector<Tensor>(uint32_t, std::chrono::milliseconds)>;

// Note [Gloo with CUDA tensors]: host() gives the tensor Gloo moves (a CUDA
// tensor's pinned twin, or the CPU tensor itself); wrap() makes a body wait for
// the copies in, run, copy the results back, and report the device tensors.
// With CPU tensors only (always, without lockstep's CUDA library) this is the identity.
class Staging {
 public:
  Tensor host(const Tensor& t, bool in, bool out, const char* collective) {
    return set_.host(t, in, out, collective);
  }
  // `part`, if given, is the only piece of the (single) staged tensor this body writes.
  Body wrap(Body body, const Tensor* part = nullptr) const {
    if (set_.empty()) return body;
    std::optional<Tensor> piece = part != nullptr ? std::optional<Tensor>(*part) : std::nullopt;
    return [body = std::move(body), set = set_, piece](uint32_t tag, std::chrono::milliseconds timeout) {
      set.before();
      std::vector<Tensor> out = body(tag, timeout);
      set.after(piece ? &*piece : nullptr);
      set.report_devices(out);
      return out;
    };
  }

 private:
  detail::HostStagingSet set_;
};

}  // namespace

Tensor ProcessGroupGloo::empty_buffer(int64_t numel, ScalarType dtype, Device device) {
  detail::ShmBuffers* buffers = shm_ != nullptr ? shm_->buffers() : nullptr;
  if (buffers == nullptr || !device.is_cpu() || numel <= 0) return ProcessGroup::empty_buffer(numel, dtype, device);
  std::shared_ptr<void> owner;  // frees the memory with the tensor's storage
  void* data = nullptr;
  try {
    data = buffers->allocate(static_cast<size_t>(numel) * element_size(dtype), &owner);
  } catch (const Error& e) {  // out of file descriptors or memory: an ordinary tensor still works
    static std::once_flag warned;
    std::call_once(warned, [&] {
      std::fprintf(stderr, "lockstep: ProcessGroupGloo::empty_buffer: %s; using ordinary memory (collectives on it "
                   "copy through the shared-memory slots)\n", e.what());
    });
    return ProcessGroup::empty_buffer(numel, dtype, device);
  }
  return from_blob(data, {numel}, [owner](void*) {}, TensorOptions().dtype(dtype));  // (numel), zero-filled
}

// See Note [Large allreduce in chunks]: a tensor above options_.chunk_bytes
// becomes consecutive collectives on its pieces, one Work over all of them.
std::shared_ptr<Work> ProcessGroupGloo::allreduce(Tensor& original, ReduceOp op) {
  Staging staging;
  Tensor tensor = staging.host(original, true, true, "allreduce");
  detail::check_tensor(tensor, "allreduce");
  auto reduce = detail::reduce_function(tensor.dtype(), op, "allreduce");
  if (shm_ != nullptr) {  // Note [Shared memory on one host]: one Work, chunked inside
    Pending p;
    p.on_shm = true;
    p.fingerprint = detail::make_fingerprint(0, CollectiveKind::ALLREDUCE, &tensor, static_cast<int>(op));
    p.body = [this, tensor, op, f = p.fingerprint](uint32_t tag, std::chrono::milliseconds timeout) {
      on_shm(tag, f, [&](const detail::Fingerprint& fp) {
        shm_->allreduce(tensor.raw_data(), tensor.numel(), tensor.dtype(), op, fp, timeout);
      });
      return std::vector<Tensor>{tensor};
    };
    p.body = staging.wrap(std::move(p.body));
    return enqueue(std::move(p));
  }
  const int64_t numel = tensor.numel();
  const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(options_.chunk_bytes / tensor.element_size()));
  const int64_t pieces = options_.threads > 1 && size_ > 1 && numel > chunk ? (numel + chunk - 1) / chunk : 1;
  Tensor flat = tensor.view({numel});  // (numel,), shares tensor's storage
  std::vector<Pending> parts;
  for (int64_t k = 0; k < pieces; ++k) {
    Tensor part = pieces == 1 ? tensor : flat.narrow(0, k * chunk, std::min(chunk, numel - k * chunk));
    const bool power_of_two = (size_ & (size_ - 1)) == 0;
    const auto algorithm = part.nbytes() < options_.ring_threshold_bytes && power_of_two
                               ? gloo::AllreduceOptions::Algorithm::BCUBE
                               : gloo::AllreduceOptions::Algorithm::RING;
    Pending p;
    // The fingerprint names the whole tensor (and the piece), so ranks that
    // disagree on the total size are caught even when the first pieces match.
    p.fingerprint = detail::make_fingerprint(0, CollectiveKind::ALLREDUCE, &tensor, static_cast<int>(op));
    p.fingerprint.reserved = k;
    p.body = [this, part, op, reduce, algorithm](uint32_t tag, std::chrono::milliseconds timeout) {
      if (part.numel() > 0 && size_ > 1) {
        gloo::AllreduceOptions opts(context_);
        opts.setAlgorithm(algorithm);
        gloo_detail::with_element_type(part.element_size(), [&]<class E>() {
          opts.setOutput(static_cast<E*>(part.raw_data()), static_cast<size_t>(part.numel()));
        });
        opts.setReduceFunction(reduce);
        opts.setTag(tag);
        opts.setTimeout(timeout);
        gloo_detail::call_gloo(*context_, [&] { gloo::allreduce(opts); });
      }
      if (op == ReduceOp::AVG) detail::divide_in_place(part.raw_data(), part.dtype(), part.numel(), size_);
      return std::vector<Tensor>{part};
    };
    p.body = staging.wrap(std::move(p.body), &part);
    parts.push_back(std::move(p));
  }
  return enqueue(std::move(parts), {original});
}

std::shared_ptr<Work> ProcessGroupGloo::broadcast(Tensor& original, int root) {
  Staging staging;
  Tensor tensor = staging.host(original, true, true, "broadcast");
  detail::check_tensor(tensor, "broadcast");
  detail::check_rank(root, size_, "broadcast", "root");
  Pending p;
  p.fingerprint = detail::make_fingerprint(0, CollectiveKind::BROADCAST, &tensor, -1, root);
  p.on_shm = shm_ != nullptr;
  p.body = [this, tensor, root, f = p.fingerprint](uint32_t tag, std::chrono::milliseconds timeout) {
    if (shm_ != nullptr) {
      on_shm(tag, f, [&](const detail::Fingerprint& fp) {
        shm_->broadcast(tensor.raw_data(), tensor.nbytes(), root, fp, timeout);
      });
    } else if (tensor.numel() > 0 && size_ > 1) {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(static_cast<uint8_t*>(tensor.raw_data()), tensor.nbytes());
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo_detail::call_gloo(*context_, [&] { gloo::broadcast(opts); });
    }
    return std::vector<Tensor>{tensor};
  };
  p.body = staging.wrap(std::move(p.body));
  return enqueue(std::move(p));
}

// Gloo's reduce: the tensor's segments travel around the ring towards the
// root, each reduced on the way; every rank's buffer is scratch (in place).
std::shared_ptr<Work> ProcessGroupGloo::reduce(Tensor& original, int root, ReduceOp op) {
  Staging staging;
  Tensor tensor = staging.host(original, true, true, "reduce");
  detail::check_tensor(tensor, "reduce");
  detail::check_rank(root, size_, "reduce", "root");
  auto reduce = detail::reduce_function(tensor.dtype(), op, "reduce");
  Pending p;
  p.fingerprint = detail::make_fingerprint(0, CollectiveKind::REDUCE, &tensor, static_cast<int>(op), root);
  p.body = [this, tensor, root, op, reduce](uint32_t tag, std::chrono::milliseconds timeout) {
    if (tensor.numel() > 0 && size_ > 1) {
      gloo::ReduceOptions opts(context_);
      gloo_detail::with_element_type(tensor.element_size(), [&]<class E>() {
        opts.setOutput(static_cast<E*>(tensor.raw_data()), static_cast<size_t>(tensor.numel()));
      });
      opts.setRoot(root);
      opts.setReduceFunction(reduce);
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo_detail::call_gloo(*context_, [&] { gloo::reduce(opts); });
    }
    if (op == ReduceOp::AVG && rank_ == root) {
      detail::divide_in_place(tensor.raw_data(), tensor.dtype(), tensor.numel(), size_);
    }
    return std::vector<Tensor>{tensor};
  };
  p.body = staging.wrap(std::move(p.body));
  return enqueue(std::move(p));
}

std::shared_ptr<Work> ProcessGroupGloo::allgather(std::vector<Tensor>& device_outputs, const Tensor& original) {
  Staging staging;
  const detail::StagedGather ops = detail::stage_allgather(staging, device_outputs, original, size_);
  const Tensor& input = ops.input;
  const std::vector<Tensor>& outputs = ops.outputs;
  Pending p;
  p.fingerprint = detail::make_fingerprint(0, CollectiveKind::ALLGATHER, &input);
  p.on_shm = shm_ != nullptr;
  p.body = [this, outputs, input, f = p.fingerprint](uint32_t tag, std::chrono::milliseconds timeout) {
    const size_t bytes = input.nbytes();
    if (shm_ != nullptr) {
      std::vector<void*> to;
      for (const Tensor& o : outputs) to.push_back(o.raw_data());
      on_shm(tag, f, [&](const detail::Fingerprint& fp) { shm_->allgather(input.raw_data(), to, bytes, fp, timeout); });
    } else if (bytes > 0) {
      // Gloo gathers into one flat buffer; rank r's block then goes to outputs[r].
      std::vector<uint8_t> flat(bytes * size_);
      gloo::AllgatherOptions opts(context_);
      opts.setInput(static_cast<uint8_t*>(input.raw_data()), bytes);
      opts.setOutput(flat.data(), flat.size());
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo_detail::call_gloo(*context_, [&] { gloo::allgather(opts); });
      for (int r = 0; r < size_; ++r) std::memcpy(outputs[r].raw_data(), flat.data() + r * bytes, bytes);
    }
    return outputs;
  };
  p.body = staging.wrap(std::move(p.body));
  return enqueue(std::move(p));
}

std::shared_ptr<Work> ProcessGroupGloo::reduce_scatter(Tensor& device_output, std::vector<Tensor>& device_inputs,
                                                       ReduceOp op) {
  Staging staging;
  const detail::StagedScatter ops = detail::stage_reduce_scatter(staging, device_output, device_inputs, size_);
  const Tensor& output = ops.output;
  const std::vector<Tensor>& inputs = ops.inputs;
  auto reduce = detail::reduce_function(output.dtype(), op, "reduce_scatter");
  Pending p;
  p.fingerprint = detail::make_fingerprint(0, CollectiveKind::REDUCE_SCATTER, &output, static_cast<int>(op));
  p.body = [this, output, inputs, op, reduce](uint32_t tag, std::chrono::milliseconds timeout) {
    // Gloo 0.5's unbound-buffer API has no reduce-scatter, so: allreduce the
    // inputs laid end to end (ring) and keep block rank(). That moves the
    // allgather half too — 2(N-1)/N of the data instead of (N-1)/N.
    const size_t bytes = output.nbytes();
    if (bytes > 0) {
      std::vector<uint8_t> flat(bytes * size_);
      for (int r = 0; r < size_; ++r) std::memcpy(flat.data() + r * bytes, inputs[r].raw_data(), bytes);
      if (size_ > 1) {
        gloo::AllreduceOptions opts(context_);
        opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        gloo_detail::with_element_type(output.element_size(), [&]<class E>() {
          opts.setOutput(reinterpret_cast<E*>(flat.data()), static_cast<size_t>(output.numel()) * size_);
        });
        opts.setReduceFunction(reduce);
        opts.setTag(tag);
        opts.setTimeout(timeout);
        gloo_detail::call_gloo(*context_, [&] { gloo::allreduce(opts); });
      }
      std::memcpy(output.raw_data(), flat.data() + rank_ * bytes, bytes);
      if (op == ReduceOp::AVG) detail::divide_in_place(output.raw_data(), output.dtype(), output.numel(), size_);
    }
    return std::vector<Tensor>{output};
  };
  p.body = staging.wrap(std::move(p.body));
  return enqueue(std::move(p));
}

std::shared_ptr<Work> ProcessGroupGloo::barrier() {
  Pending p;
  p.fingerprint = detail::make_fingerprint(0, CollectiveKind::BARRIER);
  p.body = [this](uint32_t tag, std::chrono::milliseconds timeout) {
    // With shared memory the fingerprint step before it (check_in_shared_memory_first) is the barrier.
    if (size_ > 1 && shm_ == nullptr) {
      gloo::BarrierOptions opts(context_);
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo_detail::call_gloo(*context_, [&] { gloo::barrier(opts); });
    }
    return std::vector<Tensor>{};
  };
  return enqueue(std::move(p));
}

// Point-to-point: Gloo's unbound buffers, on a slot made from the user's tag.
// They run on the worker like collectives, in issue order, and block it until
// the peer has matched them — so pair them like blocking MPI sends (one rank
// sends first while the other receives first). No fingerprint: the peers of a
// send/recv are two ranks, not the group.
std::shared_ptr<Work> ProcessGroupGloo::send(const Tensor& original, int dst_rank, int tag) {
  Staging staging;
  const Tensor tensor = staging.host(original, true, false, "send");
  detail::check_tensor(tensor, "send");
  detail::check_rank(dst_rank, size_, "send", "dst_rank");
  LS_CHECK(dst_rank != rank_, "send: rank ", rank_, " cannot send to itself");
  Pending p;
  p.fingerprint = detail::make_fingerprint(0, CollectiveKind::SEND, &tensor);
  p.body = [this, tensor, dst_rank, tag](uint32_t, std::chrono::milliseconds timeout) {
    auto buf = context_->createUnboundBuffer(tensor.raw_data(), tensor.nbytes());
    gloo_detail::call_gloo(*context_, [&] {
      buf->send(dst_rank, gloo::Slot::build(gloo_detail::kPointToPointSlotPrefix, static_cast<uint32_t>(tag)));
      buf->waitSend(timeout);
    });
    return std::vector<Tensor>{tensor};
  };
  p.body = staging.wrap(std::move(p.body));
  return enqueue(std::move(p), /*collective=*/false);
}

std::shared_ptr<Work> ProcessGroupGloo::recv(Tensor& original, int src_rank, int tag) {
  Staging staging;
  Tensor tensor = staging.host(original, false, true, "recv");
  detail::check_tensor(tensor, "recv");
  detail::check_rank(src_rank, size_, "recv", "src_rank");
  LS_CHECK(src_rank != rank_, "recv: rank ", rank_, " cannot receive from itself");
  Pending p;
  p.fingerprint = detail::make_fingerprint(0, CollectiveKind::RECV, &tensor);
  p.body = [this, tensor, src_rank, tag](uint32_t, std::chrono::milliseconds timeout) {
    auto buf = context_->createUnboundBuffer(tensor.raw_data(), tensor.nbytes());
    gloo_detail::call_gloo(*context_, [&] {
      buf->recv(src_rank, gloo::Slot::build(gloo_detail::kPointToPointSlotPrefix, static_cast<uint32_t>(tag)));
      buf->waitRecv(timeout);
    });
    return std::vector<Tensor>{tensor};
  };
  p.body = staging.wrap(std::move(p.body));
  return enqueue(std::move(p), /*collective=*/false);
}

}  // namespace lockstep::distributed
