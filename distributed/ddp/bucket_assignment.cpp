// distributed/ddp/bucket_assignment.cpp — greedy bucketing by (device, dtype) in
// the expected ready order (reverse registration order by default).
// Read before: distributed/ddp/bucket_assignment.h.
#include "distributed/ddp/bucket_assignment.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <utility>

namespace lockstep::distributed {

std::vector<BucketSpec> compute_bucket_assignment(const std::vector<Tensor>& params,
                                                  double first_bucket_mb, double bucket_cap_mb) {
  std::vector<size_t> reverse(params.size());
  std::iota(reverse.rbegin(), reverse.rend(), size_t{0});  // n-1, ..., 1, 0
  return compute_bucket_assignment(params, reverse, first_bucket_mb, bucket_cap_mb);
}

std::vector<BucketSpec> compute_bucket_assignment(const std::vector<Tensor>& params,
                                                  const std::vector<size_t>& ready_order,
                                                  double first_bucket_mb, double bucket_cap_mb) {
  LS_CHECK(bucket_cap_mb >= 0 && first_bucket_mb >= 0, "DDP: bucket sizes must be >= 0, got "
           "bucket_cap_mb=", bucket_cap_mb, " first_bucket_mb=", first_bucket_mb);
  // position[i]: where parameter i comes in the ready order.
  std::vector<size_t> position(params.size(), params.size());
  LS_CHECK(ready_order.size() == params.size(), "DDP bucket assignment: the ready order lists ",
           ready_order.size(), " parameters but there are ", params.size());
  for (size_t k = 0; k < ready_order.size(); ++k) {
    const size_t i = ready_order[k];
    LS_CHECK(i < params.size() && position[i] == params.size(), "DDP bucket assignment: the ready "
             "order is not a permutation of the ", params.size(), " parameter indices (index ", i,
             " out of range or repeated)");
    position[i] = k;
  }
  constexpr double kMB = 1024.0 * 1024.0;
  struct Open {
    BucketSpec spec;
    bool first = true;  // still filling the first bucket of this (device, dtype)
  };
  // Key: (device type, device index, dtype) — one open bucket per key.
  std::map<std::tuple<int, int, int>, Open> open;
  std::vector<BucketSpec> closed;
  for (size_t i : ready_order) {
    const Tensor& p = params[i];
    auto key = std::make_tuple(static_cast<int>(p.device().type), p.device().index,
                               static_cast<int>(p.dtype()));
    Open& b = open[key];
    if (b.spec.param_indices.empty()) {
      b.spec.device = p.device();
      b.spec.dtype = p.dtype();
    }
    b.spec.param_indices.push_back(i);
    b.spec.bytes += p.nbytes();
    double limit_mb = bucket_cap_mb == 0 ? 0 : (b.first ? std::min(first_bucket_mb, bucket_cap_mb)
                                                        : bucket_cap_mb);
    if (static_cast<double>(b.spec.bytes) >= limit_mb * kMB) {
      closed.push_back(std::move(b.spec));
      b.spec = BucketSpec{};
      b.first = false;
    }
  }
  for (auto& [key, b] : open) {
    if (!b.spec.param_indices.empty()) closed.push_back(std::move(b.spec));
  }
  // Launch order: by where each bucket's first parameter comes in the ready
  // order (the bucket expected to fill first goes first).
  std::stable_sort(closed.begin(), closed.end(), [&](const BucketSpec& a, const BucketSpec& b) {
    return position[a.param_indices.front()] < position[b.param_indices.front()];
  });
  return closed;
}

}  // namespace lockstep::distributed
