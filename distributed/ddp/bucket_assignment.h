// distributed/ddp/bucket_assignment.h — which parameters share a gradient bucket.
//
// A pure function (docs/design.md "DDP in pieces", step 1). Parameters are taken in
// the order their gradients are expected to become ready in backward, and
// grouped by (device, dtype), since one AllReduce moves one flat buffer of one
// type on one device. A bucket is closed once it holds at least its size
// limit: the first bucket's limit is small (first_bucket_mb, 1 MB) so that
// communication starts early in backward, the rest use bucket_cap_mb (25 MB).
// bucket_cap_mb = 0 gives one bucket per parameter. Buckets are returned in
// launch order: bucket 0 holds the parameters expected ready first.
//
// The expected order is, at construction, REVERSE registration order — roughly
// the order gradients become ready (Note [Registration order] in nn/module.h).
// After the first iteration the Reducer may call the second overload with the
// order it actually observed (Note [Bucket rebuild from the traced order] in
// distributed/ddp/reducer_rebuild.cpp).
// Read before: distributed/ddp/ddp_options.h. Read next: distributed/ddp/bucket.h.
#pragma once

#include <cstddef>
#include <vector>

#include "core/tensor.h"

namespace lockstep::distributed {

struct BucketSpec {
  std::vector<size_t> param_indices;  // into the parameter list, in bucket order
  Device device;
  ScalarType dtype = kFloat32;
  size_t bytes = 0;
};

// Buckets in reverse registration order.
std::vector<BucketSpec> compute_bucket_assignment(const std::vector<Tensor>& params,
                                                  double first_bucket_mb, double bucket_cap_mb);

// Buckets in `ready_order`: a permutation of 0..params.size()-1, the parameter
// whose gradient is ready first coming first.
std::vector<BucketSpec> compute_bucket_assignment(const std::vector<Tensor>& params,
                                                  const std::vector<size_t>& ready_order,
                                                  double first_bucket_mb, double bucket_cap_mb);

}  // namespace lockstep::distributed
