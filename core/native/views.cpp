// core/native/views.cpp — ops that reinterpret a tensor's storage without copying.
//
// A view is a new TensorImpl with other sizes/strides/offset on the same
// Storage: writing through a view changes the base tensor. reshape() is a view
// when the strides allow it and a copy otherwise, like PyTorch's.
// Read before: core/tensor_impl.h, core/native/memory.cpp. Read next: core/native/index.cpp.
#include <algorithm>

#include "core/native/memory_format.h"
#include "core/native/native.h"
#include "core/shape.h"

namespace lockstep::native {

Tensor as_strided(const Tensor& t, const IntList& sizes, const IntList& strides, int64_t offset) {
  return Tensor(std::make_shared<TensorImpl>(t.impl()->storage, sizes, strides, offset, t.dtype()));
}

IntList infer_size(const IntList& sizes, int64_t numel, const char* op) {
  IntList out = sizes;
  int64_t known = 1;
  int64_t infer_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      LS_CHECK(infer_at < 0, op, ": only one dimension can be -1, got shape ", shape_str(sizes));
      infer_at = static_cast<int64_t>(i);
    } else {
      LS_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in shape ", shape_str(sizes));
      known *= out[i];
    }
  }
  if (infer_at >= 0) {
    LS_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(sizes),
             " is invalid for a tensor of ", numel, " elements");
    out[infer_at] = numel / known;
  } else {
    LS_CHECK(known == numel, op, ": shape ", shape_str(sizes), " is invalid for a tensor of ",
             numel, " elements (it has ", known, ")");
  }
  return out;
}

namespace {
// Strides for viewing (sizes, strides) as `target` without a copy, or empty if
// impossible. Walks groups of old dims that are contiguous with each other
// ("chunks") and splits/merges within each chunk (same rule as PyTorch).
IntList view_strides(const IntList& sizes, const IntList& strides, const IntList& target) {
  IntList out(target.size());
  if (numel_of(sizes) == 0 || sizes.empty()) return contiguous_strides(target);
  int64_t view_d = static_cast<int64_t>(target.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    // A chunk ends at d when d is the first dim or d-1 is not contiguous with d.
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || target[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= target[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return {};
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return {};
  return out;
}
}  // namespace

Tensor view(const Tensor& t, const IntList& sizes) {
  IntList target = infer_size(sizes, t.numel(), "view");
  IntList strides = view_strides(t.sizes(), t.strides(), target);
  LS_CHECK(!strides.empty() || target.empty(), "view: cannot view a tensor of shape ",
           t.shape_str(), " with strides ", shape_str(t.strides()), " as ", shape_str(target),
           " without copying; use .reshape(...) (copies when needed) or call .contiguous() first",
           stored_channels_last(t)
               ? " (this tensor is stored channels-last, as the bf16 convolutions under autocast "
                 "return their activations: Note [Channels-last activations] in "
                 "core/native/memory_format.h)"
               : "");
  return as_strided(t, target, strides, t.storage_offset());
}

Tensor reshape(const Tensor& t, const IntList& sizes) {
  IntList target = infer_size(sizes, t.numel(), "reshape");
  IntList strides = view_strides(t.sizes(), t.strides(), target);
  if (!strides.empty() || target.empty()) return as_strided(t, target, strides, t.storage_offset());
  return view(clone(t), target);
}

Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1) {
  int64_t d0 = wrap_dim(dim0, t.dim(), "transpose");
  int64_t d1 = wrap_dim(dim1, t.dim(), "transpose");
  if (t.dim() == 0) return as_strided(t, {}, {}, t.storage_offset());
  IntList sizes = t.sizes(), strides = t.strides();
  std::swap(sizes[d0], sizes[d1]);
  std::swap(strides[d0], strides[d1]);
  return as_strided(t, sizes, strides, t.storage_offset());
}

Tensor permute(const Tensor& t, const IntList& dims) {
  LS_CHECK(static_cast<int64_t>(dims.size()) == t.dim(), "permute: got ", dims.size(),
           " dims ", shape_str(dims), " for a tensor of shape ", t.shape_str(), " (", t.dim(),
           " dims); give each dim exactly once");
  IntList sizes(dims.size()), strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], t.dim(), "permute");
    LS_CHECK(!seen[d], "permute: dim ", d, " appears twice in ", shape_str(dims));
    seen[d] = true;
    sizes[i] = t.sizes()[d];
    strides[i] = t.strides()[d];
  }
  return as_strided(t, sizes, strides, t.storage_offset());
}

Tensor unsqueeze(const Tensor& t, int64_t dim) {
  int64_t d = wrap_dim(dim, t.dim() + 1, "unsqueeze");
  IntList sizes = t.sizes(), strides = t.strides();
  int64_t stride = d < t.dim() ? sizes[d] * strides[d] : 1;
  sizes.insert(sizes.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  return as_strided(t, sizes, strides, t.storage_offset());
}

Tensor squeeze(const Tensor& t, int64_t dim) {
  if (t.dim() == 0) return as_strided(t, {}, {}, t.storage_offset());
  int64_t d = wrap_dim(dim, t.dim(), "squeeze");
  if (t.sizes()[d] != 1) return as_strided(t, t.sizes(), t.strides(), t.storage_offset());
  IntList sizes = t.sizes(), strides = t.strides();
  sizes.erase(sizes.begin() + d);
  strides.erase(strides.begin() + d);
  return as_strided(t, sizes, strides, t.storage_offset());
}

Tensor squeeze(const Tensor& t) {
  IntList sizes, strides;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.sizes()[d] == 1) continue;
    sizes.push_back(t.sizes()[d]);
    strides.push_back(t.strides()[d]);
  }
  return as_strided(t, sizes, strides, t.storage_offset());
}

Tensor flatten(const Tensor& t, int64_t start_dim, int64_t end_dim) {
  if (t.dim() == 0) return reshape(t, {1});
  int64_t s = wrap_dim(start_dim, t.dim(), "flatten");
  int64_t e = wrap_dim(end_dim, t.dim(), "flatten");
  LS_CHECK(s <= e, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim,
           " for a tensor of shape ", t.shape_str());
  IntList sizes(t.sizes().begin(), t.sizes().begin() + s);
  int64_t merged = 1;
  for (int64_t d = s; d <= e; ++d) merged *= t.sizes()[d];
  sizes.push_back(merged);
  sizes.insert(sizes.end(), t.sizes().begin() + e + 1, t.sizes().end());
  return reshape(t, sizes);
}

Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  LS_CHECK(t.dim() > 0, "narrow: cannot narrow a 0-d tensor");
  int64_t d = wrap_dim(dim, t.dim(), "narrow");
  int64_t size = t.sizes()[d];
  if (start < 0) start += size;
  LS_CHECK(start >= 0 && length >= 0 && start + length <= size, "narrow: range [", start, ", ",
           start + length, ") is out of bounds for dim ", d, " of size ", size, " (shape ",
           t.shape_str(), ")");
  IntList sizes = t.sizes();
  sizes[d] = length;
  return as_strided(t, sizes, t.strides(), t.storage_offset() + start * t.strides()[d]);
}

Tensor select(const Tensor& t, int64_t dim, int64_t index) {
  LS_CHECK(t.dim() > 0, "select: cannot index a 0-d tensor");
  int64_t d = wrap_dim(dim, t.dim(), "select");
  int64_t size = t.sizes()[d];
  LS_CHECK(index >= -size && index < size, "select: index ", index, " is out of range for dim ",
           d, " of size ", size, " (shape ", t.shape_str(), ")");
  if (index < 0) index += size;
  IntList sizes = t.sizes(), strides = t.strides();
  int64_t offset = t.storage_offset() + index * strides[d];
  sizes.erase(sizes.begin() + d);
  strides.erase(strides.begin() + d);
  return as_strided(t, sizes, strides, offset);
}

Tensor expand(const Tensor& t, const IntList& sizes) {
  LS_CHECK(static_cast<int64_t>(sizes.size()) >= t.dim(), "expand: the target shape ",
           shape_str(sizes), " has fewer dims than the tensor's shape ", t.shape_str());
  size_t lead = sizes.size() - static_cast<size_t>(t.dim());
  IntList out_sizes(sizes.size()), out_strides(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i < lead) {
      LS_CHECK(sizes[i] >= 0, "expand: new leading dim ", i, " cannot be ", sizes[i], " (target ",
               shape_str(sizes), ")");
      out_sizes[i] = sizes[i];
      out_strides[i] = 0;
      continue;
    }
    int64_t have = t.sizes()[i - lead];
    int64_t want = sizes[i] == -1 ? have : sizes[i];
    LS_CHECK(have == want || have == 1, "expand: cannot expand shape ", t.shape_str(), " to ",
             shape_str(sizes), " (dim ", i, ": size ", have, " must match ", want, " or be 1)");
    out_sizes[i] = want;
    out_strides[i] = have == want ? t.strides()[i - lead] : 0;
  }
  return as_strided(t, out_sizes, out_strides, t.storage_offset());
}

}  // namespace lockstep::native
