// distributed/process_group/collective_check.cpp — fingerprints and argument checks.
// Read before: distributed/process_group/collective_check.h.
#include "distributed/process_group/collective_check.h"

#include <cstdlib>
#include <cstring>

#include "core/factory.h"

namespace lockstep::distributed::detail {

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::ALLREDUCE: return "allreduce";
    case CollectiveKind::BROADCAST: return "broadcast";
    case CollectiveKind::ALLGATHER: return "allgather";
    case CollectiveKind::REDUCE_SCATTER: return "reduce_scatter";
    case CollectiveKind::BARRIER: return "barrier";
    case CollectiveKind::SEND: return "send";
    case CollectiveKind::RECV: return "recv";
    case CollectiveKind::REDUCE: return "reduce";
  }
  return "collective";
}

Fingerprint make_fingerprint(int64_t seq, CollectiveKind kind, const Tensor* t, int op, int root) {
  Fingerprint f;
  f.seq = seq;
  f.kind = static_cast<int32_t>(kind);
  if (t != nullptr) {
    f.dtype = static_cast<int32_t>(t->dtype());
    f.numel = t->numel();
  }
  f.op = op;
  f.root = root;
  return f;
}

std::string describe(const Fingerprint& f) {
  std::string s = lockstep::detail::str(collective_name(static_cast<CollectiveKind>(f.kind)), " #", f.seq);
  if (f.dtype >= 0) s += lockstep::detail::str(" of ", f.numel, " ", dtype_name(static_cast<ScalarType>(f.dtype)));
  if (f.op >= 0) s += lockstep::detail::str(", ", reduce_op_name(static_cast<ReduceOp>(f.op)));
  if (f.root >= 0) s += lockstep::detail::str(", root ", f.root);
  return s;
}

std::string fingerprint_mismatch(const Fingerprint* all, int size, int my_rank, const std::string& backend) {
  const Fingerprint& mine = all[my_rank];
  for (int r = 0; r < size; ++r) {
    const Fingerprint& f = all[r];
    std::string fields;
    auto differs = [&](bool d, const char* name) {
      if (d) fields += fields.empty() ? name : lockstep::detail::str(", ", name);
    };
    differs(f.seq != mine.seq, "sequence number");
    differs(f.kind != mine.kind, "collective");
    differs(f.dtype != mine.dtype, "dtype");
    differs(f.numel != mine.numel, "number of elements");
    differs(f.op != mine.op, "reduce op");
    differs(f.root != mine.root, "root");
    if (!fields.empty()) {
      return lockstep::detail::str(
          backend, " ", collective_name(static_cast<CollectiveKind>(mine.kind)),
          ": ranks issued mismatched collectives (", fields, " differ): rank ", my_rank, " issued ",
          describe(mine), " but rank ", r, " issued ", describe(f),
          "; every rank must issue the same collectives with the same sizes, dtypes, ops and "
          "roots in the same order");
    }
  }
  return "";
}

void check_fingerprints(const Fingerprint* all, int size, int my_rank, const std::string& backend) {
  std::string mismatch = fingerprint_mismatch(all, size, my_rank, backend);
  if (!mismatch.empty()) throw Error(mismatch);
}

void check_across_ranks(ProcessGroup& group, const Fingerprint& mine, const std::string& backend) {
  Tensor in = empty({static_cast<int64_t>(sizeof(Fingerprint))}, TensorOptions().dtype(kUInt8));  // (40,)
  std::memcpy(in.raw_data(), &mine, sizeof(Fingerprint));
  std::vector<Tensor> gathered;  // size x (40,)
  group.allgather(gathered, in)->wait(group.timeout());
  std::vector<Fingerprint> all(static_cast<size_t>(group.size()));
  for (int r = 0; r < group.size(); ++r) std::memcpy(&all[r], gathered[r].raw_data(), sizeof(Fingerprint));
  check_fingerprints(all.data(), group.size(), group.rank(), backend);
}

bool debug_checks_enabled() {
  const char* v = std::getenv("LOCKSTEP_DISTRIBUTED_DEBUG");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0 && std::strcmp(v, "OFF") != 0 &&
         std::strcmp(v, "off") != 0;
}

bool collective_checks_enabled(bool option) {
  if (debug_checks_enabled()) return true;
  const char* v = std::getenv("LOCKSTEP_COLLECTIVE_CHECKS");
  if (v == nullptr || *v == '\0') return option;
  LS_CHECK(std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0, "LOCKSTEP_COLLECTIVE_CHECKS='", v,
           "' is not 0 or 1; unset it to check every collective across ranks (the default), or set 0 "
           "to check only each group's first collective");
  return *v == '1';
}

void check_tensor(const Tensor& t, const char* collective, const char* what) {
  LS_CHECK(t.defined(), collective, ": ", what, " is undefined; pass an allocated tensor");
  LS_CHECK(t.device().is_cpu(), collective, ": ", what, " is on ", t.device(),
           " but this process group moves CPU tensors; call .to(ls::Device::cpu()) first "
           "(the 'nccl' backend handles CUDA tensors)");
  LS_CHECK(t.is_contiguous(), collective, ": ", what, " with shape ", t.shape_str(),
           " is not contiguous; pass t.contiguous() (and copy the result back if needed)");
}

void check_rank(int r, int size, const char* collective, const char* what) {
  LS_CHECK(r >= 0 && r < size, collective, ": ", what, " ", r, " is out of range for a group of ",
           size, " ranks (expected 0..", size - 1, ")");
}

void prepare_gather_outputs(std::vector<Tensor>& outputs, const Tensor& input, int size,
                            const char* collective) {
  if (outputs.empty()) {
    for (int r = 0; r < size; ++r) outputs.push_back(empty(input.sizes(), TensorOptions().dtype(input.dtype())));
    return;
  }
  LS_CHECK(static_cast<int>(outputs.size()) == size, collective, ": outputs holds ", outputs.size(),
           " tensors but the group has ", size, " ranks; pass an empty vector or one tensor per rank");
  for (int r = 0; r < size; ++r) {
    check_tensor(outputs[r], collective, "outputs[r]");
    LS_CHECK(outputs[r].dtype() == input.dtype() && outputs[r].numel() == input.numel(), collective,
             ": outputs[", r, "] is ", dtype_name(outputs[r].dtype()), " ", outputs[r].shape_str(),
             " but input is ", dtype_name(input.dtype()), " ", input.shape_str(),
             "; every output must match the input's dtype and number of elements");
  }
}

void check_scatter_inputs(const std::vector<Tensor>& inputs, const Tensor& output, int size,
                          const char* collective) {
  LS_CHECK(static_cast<int>(inputs.size()) == size, collective, ": inputs holds ", inputs.size(),
           " tensors but the group has ", size, " ranks; pass one tensor per rank");
  for (int r = 0; r < size; ++r) {
    check_tensor(inputs[r], collective, "inputs[r]");
    LS_CHECK(inputs[r].dtype() == output.dtype() && inputs[r].numel() == output.numel(), collective,
             ": inputs[", r, "] is ", dtype_name(inputs[r].dtype()), " ", inputs[r].shape_str(),
             " but output is ", dtype_name(output.dtype()), " ", output.shape_str(),
             "; every input must match the output's dtype and number of elements");
  }
}

}  // namespace lockstep::distributed::detail
