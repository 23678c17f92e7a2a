// distributed/ddp/ddp_debug.cpp — Note [DDP debug levels] (ddp_debug.h).
// Read before: distributed/ddp/ddp_debug.h.
#include "distributed/ddp/ddp_debug.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace lockstep::distributed::detail {

DDPDebugLevel ddp_debug_level() {
  const char* raw = std::getenv("LOCKSTEP_DISTRIBUTED_DEBUG");
  if (raw == nullptr) return DDPDebugLevel::OFF;
  std::string v(raw);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (v.empty() || v == "0" || v == "OFF") return DDPDebugLevel::OFF;
  if (v == "INFO" || v == "1" || v == "ON") return DDPDebugLevel::INFO;
  if (v == "DETAIL") return DDPDebugLevel::DETAIL;
  throw Error(lockstep::detail::str("LOCKSTEP_DISTRIBUTED_DEBUG='", raw,
                                    "' is not a debug level; use OFF, INFO or DETAIL (Note [DDP debug levels], "
                                    "distributed/ddp/ddp_debug.h)"));
}

std::string describe_bucket_layout(const std::vector<Bucket>& buckets, const std::vector<std::string>& names,
                                   const std::vector<Tensor>& params, int rank, const std::string& when) {
  constexpr double kMB = 1024.0 * 1024.0;
  double total = 0;
  for (const auto& p : params) total += static_cast<double>(p.nbytes());
  std::ostringstream os;
  char mb[32];
  std::snprintf(mb, sizeof(mb), "%.2f", total / kMB);
  os << "DDP (rank " << rank << "): " << buckets.size() << " bucket(s) " << when << ", " << mb
     << " MB of gradients, in launch order:\n";
  for (size_t b = 0; b < buckets.size(); ++b) {
    std::snprintf(mb, sizeof(mb), "%.2f", static_cast<double>(buckets[b].flat.nbytes()) / kMB);
    os << "  bucket " << b << ": " << mb << " MB, " << buckets[b].param_indices.size() << " parameter(s):";
    for (size_t k = 0; k < buckets[b].param_indices.size(); ++k) {
      os << (k == 0 ? " " : ", ") << names[buckets[b].param_indices[k]];
    }
    os << "\n";
  }
  return os.str();
}

std::string describe_unused_parameters(const std::vector<int64_t>& local_used, const std::vector<int64_t>& global_used,
                                       const std::vector<std::string>& names, int rank, int64_t backward) {
  std::vector<size_t> local_unused, global_unused;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i < local_used.size() && local_used[i] == 0) local_unused.push_back(i);
    if (i < global_used.size() && global_used[i] == 0) global_unused.push_back(i);
  }
  std::ostringstream os;
  os << "DDP (rank " << rank << "): backward #" << backward << ": " << local_unused.size()
     << " parameter(s) got no gradient on this rank" << (local_unused.empty() ? "" : ": ")
     << quoted_names(names, local_unused) << "; " << global_unused.size() << " unused on every rank"
     << (global_unused.empty() ? "" : ": ") << quoted_names(names, global_unused) << "\n";
  return os.str();
}

std::string quoted_names(const std::vector<std::string>& names, const std::vector<size_t>& indices) {
  std::ostringstream os;
  for (size_t k = 0; k < indices.size() && k < 20; ++k) os << (k ? ", " : "") << '\'' << names[indices[k]] << '\'';
  if (indices.size() > 20) os << ", ... (" << indices.size() << " in all)";
  return os.str();
}

}  // namespace lockstep::distributed::detail
