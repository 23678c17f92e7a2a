// core/printing.cpp — `std::cout << tensor`, readable like PyTorch's repr.
//
//   tensor([[ 1.0000, -2.5000],
//           [ 0.0000,  3.1416]], dtype=float32, requires_grad=true)
// Large tensors show the first and last 3 entries of each dim with "...".
// Read before: core/tensor.h.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "core/tensor.h"

namespace lockstep {

namespace {
constexpr int64_t kEdgeItems = 3;
constexpr int64_t kSummariseAbove = 1000;

struct Printer {
  std::vector<double> values;  // logical order
  IntList sizes;
  IntList strides;  // contiguous strides of `sizes`
  bool floating = true;
  bool summarise = false;
  int width = 1;

  std::string format(double v) const {
    std::ostringstream os;
    if (!floating) {
      os << static_cast<int64_t>(v);
    } else if (std::isnan(v) || std::isinf(v)) {
      os << v;
    } else {
      os << std::fixed << std::setprecision(4) << v;
    }
    return os.str();
  }

  void print(std::ostream& os, int64_t dim, int64_t offset, int indent) const {
    if (sizes.empty()) {
      os << format(values[0]);
      return;
    }
    os << '[';
    const int64_t n = sizes[dim];
    const bool cut = summarise && n > 2 * kEdgeItems;
    for (int64_t i = 0; i < n; ++i) {
      if (cut && i == kEdgeItems) {
        os << (dim + 1 == static_cast<int64_t>(sizes.size()) ? "..., " : "...,\n");
        if (dim + 1 < static_cast<int64_t>(sizes.size())) os << std::string(indent + 1, ' ');
        i = n - kEdgeItems;
      }
      if (dim + 1 == static_cast<int64_t>(sizes.size())) {
        std::string s = format(values[offset + i]);
        os << std::string(std::max<int>(0, width - static_cast<int>(s.size())), ' ') << s;
        if (i + 1 < n) os << ", ";
      } else {
        print(os, dim + 1, offset + i * strides[dim], indent + 1);
        if (i + 1 < n) {
          os << ',' << std::string(static_cast<size_t>(sizes.size() - dim - 1), '\n')
             << std::string(indent + 1, ' ');
        }
      }
    }
    os << ']';
  }
};
}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  Printer p;
  p.values = t.to_vector<double>();
  p.sizes = t.sizes();
  p.strides = contiguous_strides(t.sizes());
  p.floating = t.is_floating_point();
  p.summarise = t.numel() > kSummariseAbove;
  for (double v : p.values) p.width = std::max<int>(p.width, static_cast<int>(p.format(v).size()));
  const std::string prefix = "tensor(";
  os << prefix;
  if (t.numel() == 0) {
    os << "[]";
  } else {
    p.print(os, 0, 0, static_cast<int>(prefix.size()));
  }
  os << ", size=[";
  for (size_t i = 0; i < p.sizes.size(); ++i) os << (i ? ", " : "") << p.sizes[i];
  os << "], dtype=" << t.dtype();
  if (!t.device().is_cpu()) os << ", device=" << t.device();
  if (t.requires_grad()) os << ", requires_grad=true";
  return os << ')';
}

}  // namespace lockstep
