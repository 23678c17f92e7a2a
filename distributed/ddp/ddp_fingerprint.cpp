// distributed/ddp/ddp_fingerprint.cpp — the per-iteration fingerprint: layout hash,
// the exchange, and the error text when ranks disagree.
// Read before: distributed/ddp/ddp_fingerprint.h (Note [DDP iteration fingerprint]).
#include "distributed/ddp/ddp_fingerprint.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "core/native/native.h"

namespace lockstep::distributed::detail {

std::array<int64_t, 6> IterationState::pack() const {
  return {static_cast<int64_t>(phase), forwards, backwards, layout_hash, num_buckets, num_elements};
}

IterationState IterationState::unpack(const int64_t* v) {
  IterationState s;
  s.phase = static_cast<DDPPhase>(v[0]);
  s.forwards = v[1];
  s.backwards = v[2];
  s.layout_hash = v[3];
  s.num_buckets = v[4];
  s.num_elements = v[5];
  return s;
}

int64_t bucket_layout_hash(const std::vector<Bucket>& buckets) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over 64-bit words
  auto mix = [&h](int64_t word) {
    for (int byte = 0; byte < 8; ++byte) h = (h ^ ((static_cast<uint64_t>(word) >> (8 * byte)) & 0xff)) * 1099511628211ull;
  };
  for (size_t b = 0; b < buckets.size(); ++b) {
    const Bucket& bucket = buckets[b];
    mix(static_cast<int64_t>(b));
    mix(static_cast<int64_t>(bucket.flat.dtype()));
    mix(static_cast<int64_t>(bucket.flat.device().type) * 1000 + bucket.flat.device().index);
    for (size_t k = 0; k < bucket.param_indices.size(); ++k) {
      mix(static_cast<int64_t>(bucket.param_indices[k]));
      mix(bucket.lengths[k]);
    }
  }
  return static_cast<int64_t>(h);
}

namespace {

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t k = 0; k < ranks.size() && k < 16; ++k) os << (k ? ", " : "") << ranks[k];
  if (ranks.size() > 16) os << ", ... (" << ranks.size() << " ranks)";
  return os.str();
}

std::string position(const IterationState& s) {
  std::ostringstream os;
  if (s.phase == DDPPhase::BACKWARD) {
    os << "in backward #" << s.backwards << ", after " << s.forwards << " synced forward(s)";
  } else {
    os << "starting forward #" << s.forwards << ", after " << s.backwards << " synced backward(s)";
  }
  return os.str();
}

std::string layout(const IterationState& s) {
  std::ostringstream os;
  os << s.num_buckets << " bucket(s) of " << s.num_elements << " elements in all (layout hash "
     << std::hex << static_cast<uint64_t>(s.layout_hash) << ")";
  return os.str();
}

// Forwards whose backward never ran: the current forward does not count yet.
int64_t forwards_without_backward(const IterationState& s) {
  return s.forwards - s.backwards - (s.phase == DDPPhase::FORWARD ? 1 : 0);
}

// Ranks grouped by key(state), groups in order of their first rank.
template <class Key>
std::vector<std::pair<IterationState, std::vector<int>>> group_by(const std::vector<IterationState>& all,
                                                                  Key key) {
  std::vector<std::pair<IterationState, std::vector<int>>> groups;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    if (all[r].phase == DDPPhase::JOINED) continue;  // only mirrors the others' collectives
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return key(g.first) == key(all[r]); });
    if (it == groups.end()) {
      groups.push_back({all[r], {r}});
    } else {
      it->second.push_back(r);
    }
  }
  return groups;
}

}  // namespace

std::string describe_disagreement(const std::vector<IterationState>& all, int my_rank) {
  // Ranks that have joined (DDPPhase::JOINED) are not compared.
  auto training = std::find_if(all.begin(), all.end(), [](const IterationState& s) { return s.phase != DDPPhase::JOINED; });
  if (std::all_of(all.begin(), all.end(), [&](const IterationState& s) {
        return s.phase == DDPPhase::JOINED || s == *training;
      })) {
    return "";
  }
  auto where = [](const IterationState& s) { return std::make_tuple(s.phase, s.forwards, s.backwards); };
  auto shape = [](const IterationState& s) { return std::make_tuple(s.layout_hash, s.num_buckets, s.num_elements); };
  const auto positions = group_by(all, where);
  const auto layouts = group_by(all, shape);

  std::ostringstream os;
  os << "DDP (rank " << my_rank << "): the ranks disagree at this iteration's collective "
     << "fingerprint (Note [DDP iteration fingerprint]): ";
  if (positions.size() > 1) {
    for (size_t g = 0; g < positions.size(); ++g) {
      os << (g ? "; " : "") << rank_list(positions[g].second) << ": " << position(positions[g].first);
    }
    os << ". ";
    const auto orphans = group_by(all, forwards_without_backward);
    if (orphans.size() > 1) {
      auto most = std::max_element(orphans.begin(), orphans.end(), [](const auto& a, const auto& b) {
        return forwards_without_backward(a.first) < forwards_without_backward(b.first);
      });
      auto least = std::min_element(orphans.begin(), orphans.end(), [](const auto& a, const auto& b) {
        return forwards_without_backward(a.first) < forwards_without_backward(b.first);
      });
      os << "Likely cause: " << rank_list(most->second) << " ran "
         << forwards_without_backward(most->first) - forwards_without_backward(least->first)
         << " more synced forward(s) whose backward never ran than " << rank_list(least->second)
         << " — a rank skipped a backward (e.g. a `continue` before loss.backward() on some ranks only), "
            "or ran an extra forward with grad enabled. ";
    } else {
      os << "Likely cause: the ranks ran different numbers of iterations or called DDP's forward and "
            "backward in different orders (rank-dependent control flow). ";
    }
  }
  if (layouts.size() > 1) {
    os << "The gradient bucket layouts differ: ";
    for (size_t g = 0; g < layouts.size(); ++g) {
      os << (g ? "; " : "") << rank_list(layouts[g].second) << ": " << layout(layouts[g].first);
    }
    os << ". Likely cause: the ranks wrapped different models or passed different "
          "DDPOptions bucket_cap_mb / first_bucket_mb. ";
  }
  os << "Every rank must run the same synced forwards and backwards, in the same order, on the same "
        "model and options (use no_sync() or NoGradGuard for rank-local work). DDP stopped before "
        "reducing mismatched gradients; this DistributedDataParallel cannot continue.";
  return os.str();
}

IterationFingerprint::IterationFingerprint(std::shared_ptr<ProcessGroup> process_group)
    : process_group_(std::move(process_group)), packed_(native::zeros({6}, kInt64)) {
  for (int r = 0; r < process_group_->size(); ++r) gathered_.push_back(native::zeros({6}, kInt64));
}

void IterationFingerprint::start(const IterationState& mine) {
  // A backward that threw before bucket 0 left its exchange unchecked: check it now.
  if (work_ != nullptr) finish();
  if (process_group_->size() == 1) return;
  mine_ = mine;
  const auto words = mine.pack();
  std::copy(words.begin(), words.end(), packed_.data_ptr<int64_t>());
  work_ = process_group_->allgather(gathered_, packed_);
}

void IterationFingerprint::finish() {
  if (work_ == nullptr) return;
  std::shared_ptr<Work> work = std::move(work_);
  work_.reset();
  const int rank = process_group_->rank();
  const std::string where = mine_.phase == DDPPhase::BACKWARD
                                ? lockstep::detail::str("backward #", mine_.backwards)
                                : lockstep::detail::str("forward #", mine_.forwards);
  wait_failed_ = false;
  try {
    work->wait(process_group_->timeout());
  } catch (const std::exception& e) {
    wait_failed_ = true;
    throw Error(lockstep::detail::str(
        "DDP (rank ", rank, "): ", where, ": the iteration fingerprint exchange with the other ranks "
        "failed (Note [DDP iteration fingerprint]): ", e.what(), ". A peer rank has probably died or "
        "stopped training (check its output, or lockstep-run's report of which rank failed first); if "
        "it is only slow, raise LOCKSTEP_TIMEOUT_S (the timeout was ", process_group_->timeout().count(),
        " ms)"));
  }
  std::vector<IterationState> all;
  for (const Tensor& t : gathered_) all.push_back(IterationState::unpack(t.data_ptr<int64_t>()));
  std::string problem = describe_disagreement(all, rank);
  if (!problem.empty()) throw Error(problem);
}

}  // namespace lockstep::distributed::detail
