// distributed/zero/zero_broadcasts.cpp — the owners' steps and the broadcasts
// of their updated parameters (waited for in zero_forward_waits.cpp).
//
// § Note [ZeRO parameter broadcasts]
// After the owners' steps every rank must hold every owner's values. A large
// contiguous parameter is broadcast IN PLACE (the owner's tensor is the
// source, the others' tensors receive): no extra memory — packing everything
// would allocate a second copy of the whole model at each step and give back
// the memory the sharded state saved. Small ones (under kPackBytes, biases and
// norms: many, tiny) are packed per owner and dtype into one flat tensor,
// broadcast once and copied out, so a step does not pay one collective latency
// per bias. Receiving into the parameters directly is safe: nothing reads them
// before their broadcasts are waited for (Note [ZeRO broadcasts overlap the
// next forward], zero_forward_waits.cpp).
//
// § Note [ZeRO pipelined broadcasts]
// A large parameter's broadcast can start only once its owner has updated it,
// and with the overlap the last bucket's is on the critical path: BERT's word
// embeddings (89 MB) are the last gradient ready, and stepping them, then
// broadcasting them, in series, was most of the optimizer's time left after
// backward. So a large parameter travels in pieces of
// ZeroOptions().broadcast_piece_mb(): the owner's inner optimizer updates it
// piece by piece (Note [Stepping in chunks], optim/optimizer.h) and the
// piece's broadcast starts from its callback, while the next piece is being
// updated; the pieces go to Gloo's worker threads side by side.
// Every rank issues the same broadcasts in the same order (or they would pair
// up wrong tensors): owner by owner in rank order; within an owner, its
// parameters in shard order (the order its inner optimizer steps them), each
// large one piece by piece, then its small ones packed. A split parameter
// (Note [ZeRO split parameters], zero_partition.h) is in every owner's list,
// as that owner's slice: its inner optimizer steps a view of the slice, whose
// gradient is the same slice of .grad (attach_slice_grads), and the slice is
// broadcast in place, in pieces, from its owner. Receivers issue that
// list directly. The owner issues a large parameter's pieces as the callback
// reports them updated; one its optimizer skips (no gradient: globally
// unused) or updates in one pass (the reference path) is issued when the
// callback reaches a later parameter, or after the step — the same list.
// The pieces' values are those of the whole update (it is element-wise), so
// the result is unchanged: bitwise plain DDP + the same optimizer.
//
// § Note [ZeRO broadcast group]
// With the overlap, the owner of a large parameter updates it piece by piece
// as its reduction arrives (Note [Handing a bucket over in pieces]) and
// broadcasts each piece at once. On the group DDP reduces on, that broadcast
// would queue behind every reduction already issued — the group's worker
// threads take collectives in issue order (Note [Collective order],
// process_group_gloo.h) — so it would start only when the reduction is nearly
// over. So a second group over the same ranks, with its own connections and
// threads, carries every broadcast of the updated parameters instead (and only
// those: the constructor's check and the state dicts stay on the optimizer's
// group): ZeroOptions().broadcast_group(pg2) if given; otherwise, with the
// overlap on a Gloo group of 2+ ranks, one the constructor makes from the
// group's store under a prefix of its own (rank 0 draws a number from the
// store and broadcasts it, so that every rank names the same group, whatever
// other optimizers or groups they made before). Every rank issues the same
// broadcasts in the same order on it, as they did on the shared group, so they
// pair up; what changes is only that they run beside the reductions (the
// optimizer's time after the last reduction, BERT-base: docs/results/zero.md).
// Read before: distributed/zero/zero_redundancy_optimizer.cpp, optim/optimizer.h.
// Read next: distributed/zero/zero_forward_waits.cpp.
#include <algorithm>

#include "core/factory.h"
#include "core/grad_mode.h"
#include "distributed/process_group/process_group_gloo.h"
#include "distributed/store/prefix_store.h"
#include "distributed/zero/zero_redundancy_optimizer.h"

namespace lockstep::distributed {

namespace {
constexpr int64_t kPackBytes = 256 * 1024;
}  // namespace

std::shared_ptr<ProcessGroup> ZeroRedundancyOptimizerBase::make_broadcast_group() const {
  ProcessGroup& pg = *process_group_;
  const auto* gloo = dynamic_cast<const ProcessGroupGloo*>(&pg);
  if (!options_.overlap_with_ddp() || !options_.own_broadcast_group() || pg.size() < 2 || gloo == nullptr ||
      pg.store() == nullptr) {
    return process_group_;
  }
  Tensor id = zeros({1}, TensorOptions().dtype(kInt64));  // (1)
  if (pg.rank() == 0) id.fill_(static_cast<double>(pg.store()->add("lockstep/zero/broadcast_groups", 1)));
  pg.broadcast(id, 0)->wait(pg.timeout());
  auto store = std::make_shared<PrefixStore>(lockstep::detail::str("lockstep/zero/broadcasts/", id.item<int64_t>()),
                                             pg.store());
  auto group = std::make_shared<ProcessGroupGloo>(std::move(store), pg.rank(), pg.size(), gloo->options());
  group->set_timeout(pg.timeout());
  return group;
}

bool ZeroRedundancyOptimizerBase::sent_in_place(size_t i) const {
  const Tensor& p = params_[i];
  return partition_.split(i) || (p.is_contiguous() && static_cast<int64_t>(p.nbytes()) >= kPackBytes);
}

int64_t ZeroRedundancyOptimizerBase::piece_numel(size_t i, int root) const {
  const int64_t length = partition_.range(i, root).length;
  const auto bytes = static_cast<int64_t>(options_.broadcast_piece_mb() * (1 << 20));
  const int64_t piece = bytes / static_cast<int64_t>(params_[i].element_size()) / 64 * 64;  // as update_in_chunks rounds
  return piece <= 0 || length <= piece ? length : piece;
}

int64_t ZeroRedundancyOptimizerBase::pieces_of(size_t i, int root) const {
  const int64_t piece = piece_numel(i, root);
  return piece == 0 ? 0 : (partition_.range(i, root).length + piece - 1) / piece;
}

void ZeroRedundancyOptimizerBase::broadcast_pieces(size_t i, int root, int64_t from, int64_t to) {
  const Tensor flat = params_[i].detach().view({-1});  // (numel), the parameter's storage
  const ZeroPartition::Range range = partition_.range(i, root);
  const int64_t piece = piece_numel(i, root);
  for (int64_t k = from; k < to; ++k) {
    const int64_t begin = range.begin + k * piece;
    ParamBroadcast b;
    b.flat = flat.narrow(0, begin, std::min(piece, range.begin + range.length - begin));  // in place
    b.params = {i};
    b.root = root;
    b.in_place = true;
    b.work = broadcaster().broadcast(b.flat, root);
    pending_.push_back(std::move(b));
  }
}

void ZeroRedundancyOptimizerBase::attach_slice_grads(const std::vector<size_t>& params, bool clear) {
  const ZeroPartition& part = partition_;
  for (size_t i : params) {
    Tensor& slice = slices_[i];
    if (!slice.defined()) continue;
    const Tensor& grad = params_[i].grad();
    if (clear || !grad.defined()) {
      slice.set_grad(Tensor());
      continue;
    }
    LS_CHECK(grad.sizes() == params_[i].sizes() && grad.dtype() == params_[i].dtype(), where(), ".step: parameter ",
             i, " of shape ", params_[i].shape_str(), " and dtype ", params_[i].dtype(), " has a gradient of shape ",
             grad.shape_str(), " and dtype ", grad.dtype());
    const ZeroPartition::Range r = part.range(i, process_group_->rank());
    slice.set_grad(grad.reshape({-1}).narrow(0, r.begin, r.length));  // (length), a view of .grad
  }
}

void ZeroRedundancyOptimizerBase::step_and_broadcast(const std::vector<size_t>& params, const GradientWait& wait) {
  NoGradGuard no_grad;
  const int me = process_group_->rank();
  const int world = process_group_->size();
  for (int r = 0; r < world; ++r) {
    // r's parameters among `params` (whole, or r's slice of a split one), in
    // shard order: ascending, as partition_.owned[r] and so r's inner optimizer.
    std::vector<size_t> theirs;
    for (size_t i : params) {
      if (partition_.owner[i] == r || partition_.split(i)) theirs.push_back(i);
    }
    std::sort(theirs.begin(), theirs.end());
    std::vector<size_t> large, small;
    for (size_t i : theirs) (sent_in_place(i) ? large : small).push_back(i);
    if (r == me && !placeholder_ && !theirs.empty()) {
      std::vector<bool> mask(inner_->parameters().size(), false);
      for (size_t i : theirs) mask[local_index_[i]] = true;
      attach_slice_grads(theirs, false);
      struct DetachSlices {  // also when a step throws
        ZeroRedundancyOptimizerBase* self;
        const std::vector<size_t>& params;
        ~DetachSlices() { self->attach_slice_grads(params, true); }
      } detach_slices{this, theirs};
      // Before a piece (or a whole update) reads the gradient: wait for it (Note
      // [Handing a bucket over in pieces]); the slice of a split parameter starts at its range.
      optim::Optimizer::StepChunkFn before;
      if (wait) {
        before = [&](size_t local, int64_t offset, int64_t length) {
          const size_t i = partition_.owned[static_cast<size_t>(me)][local];
          wait(i, partition_.range(i, me).begin + offset + length);
        };
      }
      struct ResetChunks {  // also when a step throws
        optim::Optimizer& inner;
        ~ResetChunks() { inner.set_step_chunks(0, nullptr); }
      } reset_chunks{*inner_};
      if (world == 1 || large.empty()) {
        inner_->set_step_chunks(0, nullptr, before);
        inner_->step_subset(mask);  // Note [Stepping a subset]
      } else {
        size_t next = 0;     // large[next]: the first parameter not wholly issued
        int64_t issued = 0;  // its pieces issued so far
        // Issues, in list order, all of large[0, upto), then large[upto]'s pieces before `pieces`.
        auto issue_through = [&](size_t upto, int64_t pieces) {
          while (next < upto || (next == upto && next < large.size() && issued < pieces)) {
            const int64_t end = next < upto ? pieces_of(large[next], me) : pieces;
            broadcast_pieces(large[next], me, issued, end);
            issued = end;
            if (issued == pieces_of(large[next], me)) {
              ++next;
              issued = 0;
            }
          }
        };
        inner_->set_step_chunks(piece_numel(large.front(), me), [&](size_t local, int64_t offset, int64_t length) {
          const size_t i = partition_.owned[static_cast<size_t>(me)][local];
          const auto at = std::find(large.begin() + static_cast<std::ptrdiff_t>(next), large.end(), i);
          if (at == large.end()) return;  // a small (packed) parameter
          // The pieces wholly updated by now (a one-pass update reports them all at once).
          const bool done = offset + length == partition_.range(i, me).length;
          issue_through(static_cast<size_t>(at - large.begin()),
                        done ? pieces_of(i, me) : (offset + length) / piece_numel(i, me));
        }, before);
        inner_->step_subset(mask);  // Note [Stepping a subset], Note [Stepping in chunks]
        issue_through(large.size(), 0);  // those it skipped after the last one it stepped
      }
    } else if (world > 1) {
      for (size_t i : large) broadcast_pieces(i, r, 0, pieces_of(i, r));
    }
    if (world == 1) continue;
    // This owner's small parameters, grouped by dtype and device in order of first appearance.
    std::vector<std::vector<size_t>> groups;
    for (size_t i : small) {
      auto g = std::find_if(groups.begin(), groups.end(), [&](const std::vector<size_t>& grp) {
        return params_[grp.front()].dtype() == params_[i].dtype() && params_[grp.front()].device() == params_[i].device();
      });
      if (g == groups.end()) groups.push_back({i});
      else g->push_back(i);
    }
    for (auto& g : groups) {
      int64_t total = 0;
      for (size_t i : g) total += params_[i].numel();
      const Tensor& first = params_[g.front()];
      ParamBroadcast b;
      b.flat = empty({total}, TensorOptions().dtype(first.dtype()).device(first.device()));  // (total)
      if (r == me) {
        int64_t off = 0;
        for (size_t i : g) {
          b.flat.narrow(0, off, params_[i].numel()).copy_(params_[i].detach().reshape({-1}));
          off += params_[i].numel();
        }
      }
      b.params = std::move(g);
      b.root = r;
      b.work = broadcaster().broadcast(b.flat, r);
      pending_.push_back(std::move(b));
    }
  }
}

}  // namespace lockstep::distributed
