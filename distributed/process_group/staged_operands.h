// distributed/process_group/staged_operands.h — the host operands of an allgather and a
// reduce_scatter on a CPU backend (Gloo, MPI), which may be handed CUDA tensors:
// each device tensor is swapped for its host twin (Note [Gloo with CUDA tensors]),
// then the operands are checked as every backend checks them.
// `Staging` is the backend's stager: anything with
//   Tensor host(const Tensor& t, bool copy_in, bool copy_out, const char* collective)
// that returns t itself for a CPU tensor.
// Read before: distributed/process_group/collective_check.h,
// distributed/process_group/cuda/host_staging.h.
// Read next: distributed/process_group/process_group_gloo_collectives.cpp.
#pragma once

#include <vector>

#include "core/factory.h"
#include "core/tensor.h"
#include "distributed/process_group/collective_check.h"

namespace lockstep::distributed::detail {

struct StagedGather {
  Tensor input;                 // the host input
  std::vector<Tensor> outputs;  // one host output per rank
};

// allgather's operands. An empty `device_outputs` for a CUDA input is filled with
// new tensors on the input's device (each then gets a host twin); an empty one for
// a CPU input receives the host outputs.
template <class Staging>
StagedGather stage_allgather(Staging& staging, std::vector<Tensor>& device_outputs,
                             const Tensor& original, int size) {
  if (device_outputs.empty() && original.defined() && original.device().is_cuda()) {
    for (int r = 0; r < size; ++r) {
      device_outputs.push_back(empty(
          original.sizes(), TensorOptions().dtype(original.dtype()).device(original.device())));
    }
  }
  StagedGather g;
  g.input = staging.host(original, true, false, "allgather");
  for (const Tensor& o : device_outputs) g.outputs.push_back(staging.host(o, false, true, "allgather"));
  check_tensor(g.input, "allgather", "input");
  prepare_gather_outputs(g.outputs, g.input, size, "allgather");
  if (device_outputs.empty()) device_outputs = g.outputs;
  return g;
}

struct StagedScatter {
  Tensor output;              // the host output
  std::vector<Tensor> inputs;  // one host input per rank
};

// reduce_scatter's operands.
template <class Staging>
StagedScatter stage_reduce_scatter(Staging& staging, const Tensor& device_output,
                                   const std::vector<Tensor>& device_inputs, int size) {
  StagedScatter s;
  s.output = staging.host(device_output, false, true, "reduce_scatter");
  for (const Tensor& t : device_inputs) s.inputs.push_back(staging.host(t, true, false, "reduce_scatter"));
  check_tensor(s.output, "reduce_scatter", "output");
  check_scatter_inputs(s.inputs, s.output, size, "reduce_scatter");
  return s;
}

}  // namespace lockstep::distributed::detail
