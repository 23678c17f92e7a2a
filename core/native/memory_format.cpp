// core/native/memory_format.cpp — channels-last 4-d tensors.
// Read before: core/native/memory_format.h (Note [Channels-last activations]).
#include "core/native/memory_format.h"

#include "core/native/native.h"
#include "core/shape.h"

namespace lockstep::native {

IntList channels_last_strides(const IntList& sizes) {
  LS_CHECK(sizes.size() == 4, "channels_last: expected (N, C, H, W) sizes but got ", sizes.size(),
           " dims");
  const int64_t c = sizes[1], h = sizes[2], w = sizes[3];
  return {h * w * c, 1, w * c, c};
}

bool is_channels_last(const Tensor& t) {
  if (!t.defined() || t.dim() != 4) return false;
  const IntList want = channels_last_strides(t.sizes());
  for (int64_t d = 0; d < 4; ++d) {
    if (t.size(d) != 1 && t.stride(d) != want[static_cast<size_t>(d)]) return false;
  }
  return true;
}

bool stored_channels_last(const Tensor& t) { return is_channels_last(t) && !t.is_contiguous(); }

Tensor empty_channels_last(const IntList& sizes, ScalarType dtype) {
  LS_CHECK(sizes.size() == 4, "empty_channels_last: expected (N, C, H, W) sizes but got ",
           sizes.size(), " dims");
  // An (N, H, W, C) buffer seen through the permutation (0, 3, 1, 2).
  return permute(empty({sizes[0], sizes[2], sizes[3], sizes[1]}, dtype), {0, 3, 1, 2});
}

Tensor channels_last_rows(const Tensor& t) {
  LS_CHECK(is_channels_last(t), "channels_last_rows: expected a channels-last (N, C, H, W) tensor "
           "but got shape ", t.shape_str(), " with strides ", shape_str(t.strides()));
  return view(permute(t, {0, 2, 3, 1}), {t.size(0) * t.size(2) * t.size(3), t.size(1)});
}

Tensor channels_last(const Tensor& t) {
  if (is_channels_last(t)) return t;
  Tensor out = empty_channels_last(t.sizes(), t.dtype());
  copy_(out, t);
  return out;
}

bool is_dense(const Tensor& t) { return t.is_contiguous() || is_channels_last(t); }

bool same_dense_layout(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  if (a.is_contiguous() && b.is_contiguous()) return true;
  return is_channels_last(a) && is_channels_last(b);
}

Tensor result_like(const IntList& sizes, ScalarType dtype,
                   std::initializer_list<const Tensor*> operands) {
  for (const Tensor* t : operands) {
    if (t != nullptr && t->defined() && t->sizes() == sizes && stored_channels_last(*t)) {
      return empty_channels_last(sizes, dtype);
    }
  }
  return empty(sizes, dtype);
}

}  // namespace lockstep::native
