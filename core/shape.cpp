// core/shape.cpp — dim wrapping and broadcasting rules.
// Read before: core/shape.h.
#include "core/shape.h"

#include <algorithm>
#include <sstream>

namespace lockstep {

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t lo = ndim > 0 ? -ndim : -1;
  int64_t hi = ndim > 0 ? ndim - 1 : 0;
  LS_CHECK(dim >= lo && dim <= hi, op, ": dim ", dim, " is out of range for a tensor with ", ndim,
           " dims (expected a value in [", lo, ", ", hi, "])");
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

std::string shape_str(const IntList& sizes) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < sizes.size(); ++i) os << (i ? ", " : "") << sizes[i];
  os << ']';
  return os.str();
}

IntList broadcast_shapes(const IntList& a, const IntList& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  IntList out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t sa = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t sb = i < n - b.size() ? 1 : b[i - (n - b.size())];
    LS_CHECK(sa == sb || sa == 1 || sb == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
             " cannot be broadcast together (dim ", i, ": ", sa, " vs ", sb,
             "; sizes must match or be 1)");
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

IntList broadcast_strides(const IntList& sizes, const IntList& strides, const IntList& target) {
  IntList out(target.size(), 0);
  size_t lead = target.size() - sizes.size();
  for (size_t i = 0; i < sizes.size(); ++i) {
    out[lead + i] = sizes[i] == 1 ? 0 : strides[i];
  }
  return out;
}

}  // namespace lockstep
