// distributed/ddp/bucket.h — one gradient bucket: a flat buffer, where each
// parameter's gradient lives in it, and how many are still missing.
//
// The Reducer copies each parameter's gradient (scaled by 1 / world size) into
// its slice of `flat` when the gradient is ready; when `pending` reaches zero
// the whole buffer is AllReduced at once (one collective for many small
// gradients: paper Section 3.2.2), and after the collective the averaged slices
// are copied back into the parameters' .grad. With gradient_as_bucket_view the
// slices ARE the parameters' .grad (Note [Gradients as bucket views] in
// distributed/ddp/reducer_buckets.cpp), so neither copy happens.
// Read before: bucket_assignment.h. Read next: reducer.h, ../process_group/tensor_future.h.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "distributed/process_group/tensor_future.h"

namespace lockstep::distributed {

struct Bucket {
  Tensor flat;                        // (sum of numels) of the bucket's dtype and device;
                                      // a Reducer plug-in may free it between iterations
                                      // (Note [Reducer plug-ins] in reducer_plugin.h)
  ScalarType dtype = kFloat32;        // the dtype and device flat is (re)allocated with
  Device device;
  std::vector<size_t> param_indices;  // which parameters, in slice order
  std::vector<int64_t> offsets;       // element offset of each parameter's slice
  std::vector<int64_t> lengths;       // numel of each parameter
  size_t pending = 0;                 // gradients not yet copied in this iteration
  bool launched = false;              // AllReduce (or comm hook) issued this iteration
  TensorFuture future;                // its result: the averaged flat gradients

  int64_t numel() const { return offsets.empty() ? 0 : offsets.back() + lengths.back(); }
  // The slice of `flat` for the k-th parameter of this bucket, viewed flat: (lengths[k]).
  Tensor slice(size_t k) const { return flat.narrow(0, offsets[k], lengths[k]); }
};

}  // namespace lockstep::distributed
