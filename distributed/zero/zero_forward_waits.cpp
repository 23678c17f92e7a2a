// distributed/zero/zero_forward_waits.cpp — the wait for the broadcasts of
// the updated parameters: in each layer's forward pre-hook, or in step().
//
// § Note [ZeRO broadcasts overlap the next forward]
// Without the overlap, step() used to wait for every broadcast: the whole model
// on the wire after backward, on top of plain DDP's iteration. Nothing needs
// the parameters until the next forward, and it needs them one layer at a
// time. So register_forward_waits(model) puts a forward pre-hook (Note [Forward
// pre-hooks], nn/module.h) on every layer of the model that owns parameters of
// this optimizer, as FSDP does in PyTorch; at the end of step()
// (end_step_broadcasts) the broadcasts that write each parameter — or, on its
// owner, read it — are kept per parameter (deferred_) and step() returns. A
// layer's hook waits for its own parameters' broadcasts and copies their packed
// values into place (land); so the forward of the first layers runs while the
// later layers' parameters are still on the wire. The values read are those
// step() would have waited for, so results are unchanged, bitwise.
// - Which parameters wait in a forward: those every owner of which is a layer
//   that runs its forward pre-hooks (runs_forward_pre_hooks(): the built-in
//   layers). A parameter of a user's module, whose forward may read it without
//   running hooks, is waited for in step(), as is every parameter when no
//   model was given or ZeroOptions().defer_broadcast_waits(false).
// - Reads outside a forward: the layers' state-dict pre-hooks wait for every
//   parameter before the model's state_dict() (and so ls::save),
//   load_state_dict() and to(), and before DDP's replica check; ZeRO itself
//   waits for all of them before it next overwrites its own parameters (the
//   next step(); with the overlap, the first bucket of the next backward) and
//   in its destructor. Anything else that reads a parameter between step() and
//   its layer's forward — printing it, comparing it, a collective on it — calls
//   wait_for_broadcasts() first (docs/api.md). One that forgets is refused where
//   the library sees the read: a received parameter's storage is marked until
//   it lands, so an op reading it throws naming wait_for_broadcasts(), and a
//   write in place before then fails the landing (its version moved) instead of
//   being overwritten (Note [Reads of a tensor still being written],
//   autograd/write_in_flight.h). The communication threads never wait for
//   anything: core storage knows nothing of the broadcasts.
// - A failed broadcast (a peer died before sending) fails the first wait for
//   that parameter, in the forward, with the optimizer's error naming the
//   rank; the values are unknown, so every later wait for it throws the same.
// - Autograd's version counter: a receiver's parameter's version moves when
//   the broadcasts are deferred, before any op can save the old one for
//   backward (the received bytes are written behind autograd's back).
// ZeroOptions().defer_broadcast_waits(false): step() waits for all of them, as
// before. The broadcasts hide under the forward, which takes as long as plain
// DDP's (measured on BERT-base: docs/results/distributed_choices.md,
// docs/results/zero.md).
// Read before: distributed/zero/zero_broadcasts.cpp, nn/module.h.
// Read next: distributed/zero/zero_state_dict.cpp.
#include <unordered_map>

#include "autograd/write_in_flight.h"
#include "core/grad_mode.h"
#include "core/native/native.h"
#include "distributed/zero/zero_redundancy_optimizer.h"

namespace lockstep::distributed {

namespace {
// A packed broadcast's values for one parameter: flat[offset, offset + numel) shaped like it.
Tensor packed_values(const Tensor& flat, int64_t offset, const Tensor& param) {
  return flat.narrow(0, offset, param.numel()).view(param.sizes());
}

// Waits for one broadcast, naming it when it failed.
void wait_for(const std::shared_ptr<Work>& work, int root, std::chrono::milliseconds timeout, const std::string& where) {
  try {
    work->wait(timeout);
  } catch (const std::exception& e) {
    throw Error(lockstep::detail::str(where, ": the broadcast of rank ", root, "'s updated parameters failed: ",
                                      e.what(), ". A peer rank has probably died or stopped training; every rank "
                                      "must call step() after each synced backward"));
  }
}
}  // namespace

void ZeroRedundancyOptimizerBase::register_forward_waits(nn::Module& model) {
  LS_CHECK(!model.weak_from_this().expired(), where(), ".register_forward_waits: the model must be held by a "
           "std::shared_ptr (std::make_shared<Net>(...) or a holder), so that the optimizer can remove its hooks");
  land_all();  // what is on the wire now was left to the hooks being replaced
  std::lock_guard<std::mutex> lock(deferred_mutex_);
  remove_forward_waits();  // registering again (another model, or the same) replaces the hooks
  std::unordered_map<const TensorImpl*, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].impl()] = i;
  std::vector<int> owners(params_.size(), 0);  // layers owning each parameter; -1: one runs no hooks
  std::vector<std::pair<std::shared_ptr<nn::Module>, std::vector<size_t>>> layers;
  for (const auto& [name, m] : model.named_modules()) {
    std::vector<size_t> own;
    for (const auto& [pname, p] : m->named_parameters(/*recurse=*/false, /*remove_duplicate=*/false)) {
      const auto it = index.find(p.impl());
      if (it == index.end()) continue;
      own.push_back(it->second);
      int& n = owners[it->second];
      n = n < 0 || !m->runs_forward_pre_hooks() ? -1 : n + 1;
    }
    if (!own.empty()) layers.emplace_back(m, std::move(own));
  }
  waited_in_forward_.assign(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i) waited_in_forward_[i] = owners[i] > 0;
  for (const auto& layer : layers) {
    nn::Module& m = *layer.first;
    HookedModule h;
    h.module = layer.first;
    if (m.runs_forward_pre_hooks()) {
      h.forward = m.register_forward_pre_hook([this, own = layer.second](const nn::Module&) {
        std::lock_guard<std::mutex> lock(deferred_mutex_);
        // What this rank receives first: when a peer died, its error names that
        // peer, not this rank's own send that failed with it.
        for (size_t i : own) {
          if (i < deferred_.size() && deferred_[i].received) land(i);
        }
        for (size_t i : own) land(i);
      });
    }
    h.state_dict = m.register_state_dict_pre_hook([this](const nn::Module&) { wait_for_broadcasts(); });
    hooked_.push_back(h);
  }
}

void ZeroRedundancyOptimizerBase::remove_forward_waits() noexcept {
  for (const HookedModule& h : hooked_) {
    if (std::shared_ptr<nn::Module> m = h.module.lock()) {
      m->remove_hook(h.forward);
      m->remove_hook(h.state_dict);
    }
  }
  hooked_.clear();
  waited_in_forward_.clear();
}

void ZeroRedundancyOptimizerBase::defer_pending() {
  std::lock_guard<std::mutex> lock(deferred_mutex_);
  deferred_.resize(params_.size());
  const int me = process_group_->rank();
  std::vector<bool> receives(params_.size(), false);
  for (const ParamBroadcast& b : pending_) {
    if (b.in_place) {
      const size_t i = b.params.front();
      deferred_[i].landings.push_back({b.work, b.root, Tensor(), 0, Tensor()});
      receives[i] = receives[i] || b.root != me;
      continue;
    }
    if (b.root == me) {  // the owner sent a packed copy: its parameters are free
      sent_.push_back(b);
      continue;
    }
    int64_t offset = 0;
    for (size_t i : b.params) {
      deferred_[i].landings.push_back({b.work, b.root, b.flat, offset, params_[i].detach()});
      receives[i] = true;
      offset += params_[i].numel();
    }
  }
  pending_.clear();
  // Received values are written behind autograd's back: the version moves now,
  // before any op can save the old one. Until they land, an op that reads the
  // parameter is refused (Note [Reads of a tensor still being written],
  // autograd/write_in_flight.h), and a write in place is caught by the version
  // (also of what this rank sends in place).
  for (size_t i = 0; i < params_.size(); ++i) {
    if (receives[i]) params_[i].impl()->storage->bump_version();
  }
  for (size_t i = 0; i < params_.size(); ++i) {  // after every bump: parameters may share a storage
    Deferred& d = deferred_[i];
    // Received, or sent in place by this rank: a write in place before it lands
    // would be overwritten, or would reach the peers half-sent.
    if (!d.landings.empty()) d.version = params_[i].impl()->storage->version();
    if (!receives[i] || d.received) continue;
    d.received = true;
    autograd::mark_write_in_flight(
        params_[i], lockstep::detail::str(where(), ": parameter ", i, " (shape ", params_[i].shape_str(),
                                          ") is still being received from rank ", d.landings.front().root,
                                          " (the broadcast of its update in step()); its layer's forward waits "
                                          "for it, anything else that reads it first must call "
                                          "wait_for_broadcasts() on the optimizer"));
  }
}

void ZeroRedundancyOptimizerBase::unmark_received(size_t i) noexcept {
  Deferred& d = deferred_[i];
  if (!d.received) return;
  d.received = false;
  autograd::unmark_write_in_flight(params_[i]);
}

void ZeroRedundancyOptimizerBase::land(size_t i) {
  if (i >= deferred_.size()) return;
  Deferred& d = deferred_[i];
  if (d.error) std::rethrow_exception(d.error);
  if (d.landings.empty()) return;
  NoGradGuard no_grad;
  try {
    for (const Landing& l : d.landings) wait_for(l.work, l.root, broadcaster().timeout(), where());
    // A write in place since step() raced with the broadcast (received or sent in
    // place), or would be overwritten by the packed values.
    LS_CHECK(params_[i].impl()->storage->version() == d.version, where(), ": parameter ", i, " (shape ",
             params_[i].shape_str(), ") was written in place after step() while the broadcast of its update "
             "from rank ", d.landings.front().root, " was still on the wire, so the values the ranks hold are "
             "unknown; call wait_for_broadcasts() on the optimizer before changing a parameter outside a "
             "forward (Note [Reads of a tensor still being written])");
    for (const Landing& l : d.landings) {
      if (l.param.defined()) native::copy_(l.param, packed_values(l.flat, l.offset, l.param));
    }
  } catch (...) {
    d.error = std::current_exception();
    throw;
  }
  d.landings.clear();
  unmark_received(i);
}

void ZeroRedundancyOptimizerBase::land_all(bool except_forward_waited) {
  std::lock_guard<std::mutex> lock(deferred_mutex_);
  std::exception_ptr failed;  // the first; every parameter is waited for
  for (size_t i = 0; i < deferred_.size(); ++i) {
    if (except_forward_waited && i < waited_in_forward_.size() && waited_in_forward_[i]) continue;
    try {
      land(i);
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);
}

void ZeroRedundancyOptimizerBase::end_step_broadcasts() {
  defer_pending();
  if (!options_.defer_broadcast_waits() || waited_in_forward_.empty()) {
    finish_broadcasts();
    return;
  }
  land_all(/*except_forward_waited=*/true);  // the parameters no forward pre-hook waits for: now
}

void ZeroRedundancyOptimizerBase::wait_for_broadcasts() {
  land_all();
  std::vector<ParamBroadcast> sent = std::move(sent_);
  sent_.clear();
  for (const ParamBroadcast& b : sent) wait_for(b.work, b.root, broadcaster().timeout(), where());
}

void ZeroRedundancyOptimizerBase::finish_broadcasts() {
  defer_pending();
  wait_for_broadcasts();
}

bool ZeroRedundancyOptimizerBase::broadcast_pending(size_t i) const {
  std::lock_guard<std::mutex> lock(deferred_mutex_);
  return i < deferred_.size() && (!deferred_[i].landings.empty() || deferred_[i].error);
}

}  // namespace lockstep::distributed
