// nn/expanding_array.h — ExpandingArray<D>: "one int or D ints" in layer options.
//
// Conv2d and the pooling layers take sizes that are usually square; as in
// PyTorch (and libtorch's ExpandingArray) the caller may write 3 for {3, 3} or
// give each spatial dim its own value: {3, 5}.
// Read before: nn/module.h. Read next: nn/conv.h, nn/pooling.h.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "core/error.h"
#include "core/tensor.h"

namespace lockstep::nn {

template <size_t D>
class ExpandingArray {
 public:
  ExpandingArray(int64_t value) : values_(D, value) {}  // NOLINT: implicit, like PyTorch's ints
  ExpandingArray(std::initializer_list<int64_t> values) : values_(values) { check(); }
  ExpandingArray(const IntList& values) : values_(values) { check(); }  // NOLINT: implicit

  const IntList& values() const { return values_; }
  operator const IntList&() const { return values_; }  // NOLINT: implicit
  int64_t operator[](size_t i) const { return values_[i]; }

 private:
  void check() {
    if (values_.size() == 1) values_.assign(D, values_[0]);
    LS_CHECK(values_.size() == D, "ExpandingArray: expected 1 or ", D, " values but got ",
             values_.size());
  }
  IntList values_;
};

}  // namespace lockstep::nn
