// distributed/zero/zero_state_dict.cpp — ZeroRedundancyOptimizer's state
// dicts: consolidated on one rank, sharded per rank, and loading either at
// any world size.
//
// § Note [ZeRO state dicts]
// Every form uses the keys of Note [Optimizer state dict] (optim/optimizer.h)
// with parameters named by their index in the GLOBAL parameter list (the one
// given to the constructor), never by their index within a shard:
//   consolidated  consolidate_state_dict(to) (collective: each owner
//                 broadcasts a header — per owned parameter with state, its
//                 index, step count and buffer names — then the buffers; rank
//                 `to` keeps them), then state_dict() on rank `to`. It is
//                 exactly the dict a plain optimizer over the same parameters
//                 would return, so it loads into a plain SGD/Adam/AdamW and a
//                 plain optimizer's dict loads here. state_dict() refuses on
//                 other ranks and once a step has made it stale.
//   sharded       sharded_state_dict(): this rank's entries only, plus
//                 "zero.rank", "zero.world_size" and "zero.owned" (the owned
//                 indices). The union of all shards' "state.*" entries with
//                 one shard's "param_groups.*" is the consolidated dict.
// A split parameter (Note [ZeRO split parameters], zero_partition.h) has a
// slice of its state on every rank: a shard holds that rank's slice (1-D)
// under the usual keys, plus "zero.slice.<i>" = [begin, length];
// consolidating, and load_sharded_state_dicts, put the slices together into
// whole tensors, and loading a whole dict cuts each rank's slice out of it.
// load_state_dict(d) takes a whole dict (consolidated or plain; no "zero.*"
// keys): each rank keeps the entries of the parameters it owns under the
// CURRENT partition, so a dict saved at 2 ranks loads at 1 or 4. It also
// takes this rank's own shard if the world size and the owned set match
// (Note [ZeRO partition] makes them match for the same model); a shard from
// another layout is refused, naming it — load_sharded_state_dicts(all
// shards) merges them first and then loads at any world size.
// Read before: distributed/zero/zero_redundancy_optimizer.h.
// Read next: distributed/zero/zero_overlap.cpp.
#include <set>

#include "core/factory.h"
#include "core/grad_mode.h"
#include "distributed/zero/zero_redundancy_optimizer.h"

namespace lockstep::distributed {

namespace {

using optim::parse_state_key;

const std::string kState = "state.";
const std::string kNumParams = "param_groups.num_params";
const std::string kZero = "zero.";
const std::string kSlice = "zero.slice.";  // + index: [begin, length] of a split parameter's slice

Tensor int64_scalar(int64_t v) { return scalar_tensor(static_cast<double>(v), TensorOptions().dtype(kInt64)); }

int64_t int64_of(const optim::OptimizerState& s, const std::string& key, const std::string& op) {
  auto it = s.find(key);
  LS_CHECK(it != s.end(), op, ": the shard has no key '", key, "'; was it written by sharded_state_dict()?");
  return it->second.item<int64_t>();
}

}  // namespace

optim::OptimizerState ZeroRedundancyOptimizerBase::sharded_state_dict() const {
  optim::OptimizerState out;
  const std::vector<size_t>& mine = partition_.owned[static_cast<size_t>(process_group_->rank())];
  for (auto& [key, value] : inner_->state_dict()) {
    size_t local = 0;
    std::string name;
    if (parse_state_key(key, local, name)) {
      if (placeholder_) continue;
      const size_t i = mine.at(local);
      out[kState + std::to_string(i) + "." + name] = value;
      if (partition_.split(i)) {
        const ZeroPartition::Range r = partition_.range(i, process_group_->rank());
        out[kSlice + std::to_string(i)] = tensor(std::vector<int64_t>{r.begin, r.length}, {2});
      }
    } else {
      out[key] = value;
    }
  }
  out[kNumParams] = int64_scalar(static_cast<int64_t>(params_.size()));
  out["zero.rank"] = int64_scalar(process_group_->rank());
  out["zero.world_size"] = int64_scalar(process_group_->size());
  std::vector<int64_t> owned(mine.begin(), mine.end());
  out["zero.owned"] = tensor(owned, {static_cast<int64_t>(owned.size())});
  return out;
}

void ZeroRedundancyOptimizerBase::consolidate_state_dict(int to) {
  const int world = process_group_->size(), me = process_group_->rank();
  LS_CHECK(to >= 0 && to < world, where(), ".consolidate_state_dict: rank ", to, " is not in the group of ",
           world, " ranks");
  LS_CHECK(pending_.empty(), where(), ".consolidate_state_dict: the parameter broadcasts of the last backward "
           "are still pending; call step() first");
  NoGradGuard no_grad;
  const optim::OptimizerState mine = sharded_state_dict();
  optim::OptimizerState merged;
  for (const auto& [key, value] : mine) {
    size_t i = 0;
    std::string name;
    if (key.rfind(kZero, 0) == 0 || (parse_state_key(key, i, name) && partition_.split(i))) continue;
    merged[key] = value.clone();  // a split parameter's slices come below, every rank's
  }
  const auto timeout = process_group_->timeout();
  for (int r = 0; r < world; ++r) {
    // Header: for each owned parameter with state, [index, step, #buffers, (length, chars...)...].
    std::vector<int64_t> header;
    if (r == me) {
      std::map<size_t, std::vector<std::string>> names;
      std::map<size_t, int64_t> steps;
      for (const auto& [key, value] : mine) {
        size_t i = 0;
        std::string name;
        if (!parse_state_key(key, i, name)) continue;
        if (name == "step") {
          steps[i] = value.item<int64_t>();
        } else {
          names[i].push_back(name);
        }
      }
      for (const auto& [i, step] : steps) {
        header.push_back(static_cast<int64_t>(i));
        header.push_back(step);
        header.push_back(static_cast<int64_t>(names[i].size()));
        for (const std::string& n : names[i]) {
          header.push_back(static_cast<int64_t>(n.size()));
          for (char c : n) header.push_back(static_cast<unsigned char>(c));
        }
      }
    }
    Tensor length = tensor(std::vector<int64_t>{static_cast<int64_t>(header.size())}, {1});
    process_group_->broadcast(length, r)->wait(timeout);
    const int64_t n = length.to_vector<int64_t>()[0];
    if (n == 0) continue;
    Tensor head = r == me ? tensor(header, {n}) : zeros({n}, TensorOptions().dtype(kInt64));
    process_group_->broadcast(head, r)->wait(timeout);
    const std::vector<int64_t> h = head.to_vector<int64_t>();
    size_t k = 0;
    auto next = [&]() -> int64_t {
      LS_CHECK(k < h.size(), where(), ".consolidate_state_dict: rank ", r, "'s state header is truncated");
      return h[k++];
    };
    while (k < h.size()) {
      const int64_t i = next(), step = next(), count = next();
      LS_CHECK(i >= 0 && static_cast<size_t>(i) < params_.size() &&
                   partition_.range(static_cast<size_t>(i), r).length > 0,
               where(), ".consolidate_state_dict: rank ", r, " sent state for parameter ", i,
               ", which it does not own; do all ranks use the same parameters?");
      const std::string prefix = kState + std::to_string(i) + ".";
      if (me == to) merged[prefix + "step"] = int64_scalar(step);
      for (int64_t b = 0; b < count; ++b) {
        std::string name(static_cast<size_t>(next()), ' ');
        for (char& c : name) c = static_cast<char>(next());
        const Tensor& p = params_[static_cast<size_t>(i)];
        const auto like = TensorOptions().dtype(p.dtype()).device(p.device());
        const bool split = partition_.split(static_cast<size_t>(i));
        const ZeroPartition::Range slice = partition_.range(static_cast<size_t>(i), r);
        Tensor buffer = r == me ? mine.at(prefix + name).contiguous()
                                : empty(split ? std::vector<int64_t>{slice.length} : p.sizes(), like);
        process_group_->broadcast(buffer, r)->wait(timeout);
        if (me != to) continue;
        if (!split) {
          merged[prefix + name] = r == me ? buffer.clone() : buffer;
          continue;
        }
        Tensor& whole = merged[prefix + name];  // r's slice of the split parameter's buffer
        if (!whole.defined()) whole = zeros(p.sizes(), like);
        whole.view({-1}).narrow(0, slice.begin, slice.length).copy_(buffer);
      }
    }
  }
  if (me == to) {
    consolidated_ = std::move(merged);
  } else {
    consolidated_.clear();
  }
  consolidated_to_ = to;
  consolidated_at_ = steps_;
}

optim::OptimizerState ZeroRedundancyOptimizerBase::state_dict() const {
  LS_CHECK(consolidated_to_ == process_group_->rank(), where(), ".state_dict: the state is sharded across ranks; "
           "call consolidate_state_dict(to) on every rank first, then state_dict() on rank `to`",
           consolidated_to_ >= 0 ? lockstep::detail::str(" (it was consolidated on rank ", consolidated_to_, ")")
                                 : std::string(),
           ". For this rank's shard alone use sharded_state_dict()");
  LS_CHECK(consolidated_at_ == steps_, where(), ".state_dict: the consolidated state is stale (", steps_ -
           consolidated_at_, " step(s) since consolidate_state_dict); consolidate again on every rank");
  return consolidated_;
}

void ZeroRedundancyOptimizerBase::load_state_dict(const optim::OptimizerState& state) {
  const std::string op = where() + ".load_state_dict";
  NoGradGuard no_grad;
  const std::vector<size_t>& mine = partition_.owned[static_cast<size_t>(process_group_->rank())];
  if (state.count("zero.rank")) {
    const int64_t rank = int64_of(state, "zero.rank", op), world = int64_of(state, "zero.world_size", op);
    auto it = state.find("zero.owned");
    LS_CHECK(it != state.end(), op, ": the shard has no key 'zero.owned'");
    const std::vector<int64_t> owned = it->second.to_vector<int64_t>();
    const bool same = world == process_group_->size() && rank == process_group_->rank() &&
                      owned == std::vector<int64_t>(mine.begin(), mine.end());
    LS_CHECK(same, op, ": this is rank ", rank, "'s shard of a ", world, "-rank run, but this is rank ",
             process_group_->rank(), " of ", process_group_->size(),
             world == process_group_->size() && rank == process_group_->rank()
                 ? " and the shard owns other parameters (a different model?)"
                 : "",
             "; pass every shard of that run to load_sharded_state_dicts(), or load a consolidated state_dict()");
  }
  auto count = state.find(kNumParams);
  LS_CHECK(count != state.end(), op, ": the state dict has no key '", kNumParams, "'");
  LS_CHECK(count->second.item<double>() == static_cast<double>(params_.size()), op, ": '", kNumParams,
           "' says the state was saved for ", count->second.item<double>(), " parameters but this optimizer has ",
           params_.size());
  // This rank's entries, renamed to the inner optimizer's local indices.
  optim::OptimizerState local;
  for (const auto& [key, value] : state) {
    if (key.rfind(kZero, 0) == 0) continue;
    size_t i = 0;
    std::string name;
    if (parse_state_key(key, i, name)) {
      LS_CHECK(i < params_.size(), op, ": key '", key, "' names parameter ", i, " but there are only ",
               params_.size(), " parameters");
      if (local_index_[i] == std::numeric_limits<size_t>::max()) continue;
      Tensor v = value;
      if (partition_.split(i) && value.numel() == params_[i].numel()) {
        // A whole buffer of a split parameter: this rank's slice of it (a
        // shard's own slice, of the same partition, is loaded as it is).
        const ZeroPartition::Range r = partition_.range(i, process_group_->rank());
        v = value.reshape({-1}).narrow(0, r.begin, r.length).clone();  // (length)
      }
      local[kState + std::to_string(local_index_[i]) + "." + name] = v;
      continue;
    }
    local[key] = value;
  }
  local[kNumParams] = int64_scalar(placeholder_ ? 1 : static_cast<int64_t>(mine.size()));
  inner_->load_state_dict(local);
  consolidated_.clear();
  consolidated_to_ = -1;
}

void ZeroRedundancyOptimizerBase::load_sharded_state_dicts(const std::vector<optim::OptimizerState>& shards) {
  const std::string op = where() + ".load_sharded_state_dicts";
  LS_CHECK(!shards.empty(), op, ": no shards given");
  const int64_t world = int64_of(shards[0], "zero.world_size", op);
  LS_CHECK(static_cast<int64_t>(shards.size()) == world, op, ": the shards come from a ", world,
           "-rank run but ", shards.size(), " were given; pass all of them");
  std::set<int64_t> ranks;
  optim::OptimizerState merged;
  for (const auto& shard : shards) {
    const int64_t r = int64_of(shard, "zero.rank", op);
    LS_CHECK(int64_of(shard, "zero.world_size", op) == world, op, ": rank ", r, "'s shard is from a ",
             int64_of(shard, "zero.world_size", op), "-rank run, the first from a ", world, "-rank run");
    LS_CHECK(ranks.insert(r).second, op, ": rank ", r, "'s shard was given twice");
    for (const auto& [key, value] : shard) {
      size_t i = 0;
      std::string name;
      if (key.rfind(kZero, 0) == 0) continue;
      auto slice = parse_state_key(key, i, name) && name != "step" ? shard.find(kSlice + std::to_string(i))
                                                                    : shard.end();
      if (slice == shard.end()) {
        merged[key] = value;
        continue;
      }
      // A slice of a split parameter's buffer: into its place in the whole.
      LS_CHECK(i < params_.size(), op, ": key '", key, "' names parameter ", i, " but there are only ",
               params_.size(), " parameters");
      const std::vector<int64_t> range = slice->second.to_vector<int64_t>();
      const Tensor& p = params_[i];
      LS_CHECK(range.size() == 2 && range[0] >= 0 && range[1] == value.numel() && range[0] + range[1] <= p.numel(),
               op, ": rank ", r, "'s slice of '", key, "' (", value.numel(), " elements) does not fit parameter ",
               i, " of ", p.numel(), " elements; are the shards from this model?");
      Tensor& whole = merged[key];
      if (!whole.defined()) whole = zeros(p.sizes(), TensorOptions().dtype(value.dtype()).device(p.device()));
      whole.view({-1}).narrow(0, range[0], range[1]).copy_(value.reshape({-1}));
    }
  }
  load_state_dict(merged);
}

}  // namespace lockstep::distributed
