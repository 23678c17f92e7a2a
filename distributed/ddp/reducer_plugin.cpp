// distributed/ddp/reducer_plugin.cpp — attaching a plug-in to the Reducer, a
// plug-in's defaults, and the Reducer's parts it may use (Note [Reducer plug-ins]).
// Read before: distributed/ddp/reducer_plugin.h.
#include "distributed/ddp/reducer_plugin.h"

#include "distributed/ddp/reducer.h"

namespace lockstep::distributed {

// Note [Reducer plug-ins]: the plug-in is checked, then its reduction replaces
// DDP's AllReduce, then the current buckets are rebuilt in its arrangement.
void Reducer::attach_plugin(std::unique_ptr<ReducerPlugin> plugin) {
  const int rank = process_group_->rank();
  LS_CHECK(plugin != nullptr, "DDP (rank ", rank, "): attach_plugin was given no plug-in");
  LS_CHECK(plugin_ == nullptr, "DDP (rank ", rank, "): a bucket-reduced hook (a Reducer plug-in) is already "
           "attached (one ZeroRedundancyOptimizer per DDP module)");
  storage_.disable_copy_out_by_reference();  // Note [Copy-out by reference]
  plugin->set_reducer(*this);
  plugin->attached();
  if (CommHook reduction = plugin->reduction()) launcher_.replace_allreduce(std::move(reduction), plugin->what_reduces());
  std::vector<BucketSpec> specs;
  for (const Bucket& b : storage_.buckets()) specs.push_back({b.param_indices, b.device, b.dtype, 0});
  const bool arranged = plugin->arrange(specs);
  plugin_ = std::move(plugin);
  if (arranged) {
    storage_.build(specs);
    observe_.layout_changed("arranged by a Reducer plug-in");
  }
}

void ReducerPlugin::copy_in(size_t index, bool locally_unused, double scale) {
  storage().copy_in(index, locally_unused, scale);
}

void ReducerPlugin::finalize_bucket(size_t bucket, const std::vector<int64_t>& global_used) {
  storage().copy_out(bucket, wait_for_bucket(bucket), global_used);
}

BucketStorage& ReducerPlugin::storage() { return reducer_->storage_; }
const std::vector<Tensor>& ReducerPlugin::parameters() const { return reducer_->params_; }
const DDPOptions& ReducerPlugin::options() const { return reducer_->options_; }
int ReducerPlugin::rank() const { return reducer_->process_group_->rank(); }
bool ReducerPlugin::started() const { return reducer_->started(); }
const int64_t& ReducerPlugin::backwards() const { return reducer_->observe_.backwards(); }
Tensor ReducerPlugin::wait_for_bucket(size_t bucket) { return reducer_->wait_for_bucket(bucket); }

void ReducerPlugin::wait_or_fail(const std::function<void()>& wait, size_t bucket) {
  reducer_->wait_or_fail(wait, bucket);
}

void ReducerPlugin::or_fail(const std::function<void()>& fn) { reducer_->or_fail(fn); }

void ReducerPlugin::finalize_now(size_t end) {
  if (reducer_->readiness_->tracks_unused()) return;  // the copy-out needs the bitmap
  reducer_->finalize_buckets(end, {});
}

}  // namespace lockstep::distributed
