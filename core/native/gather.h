// core/native/gather.h — gather, scatter and scatter_add_: indexing by a tensor
// of indices along one dim (the CPU reference kernels; a CUDA tensor is refused
// with a message).
//
// For a 3-d self and dim = 1 (the other dims alike):
//   gather:       out[i][j][k]               = self[i][index[i][j][k]][k]     out has index's shape
//   scatter:      out = self; out[i][index[i][j][k]][k] = src[i][j][k]        out has self's shape
//   scatter_add_: self[i][index[i][j][k]][k] += src[i][j][k]                   in place
// index is int64 with self's number of dims, index.size(d) <= self.size(d) for
// d != dim (and <= src.size(d) for the scatters); every index is checked to be
// in [0, self.size(dim)). Where scatter writes one position twice the last
// write (in index's row-major order) wins; PyTorch leaves that unspecified.
// Read before: core/native/native.h (index_select). Read next: autograd/functions/indexing_extra.cpp.
#pragma once

#include "core/tensor.h"

namespace lockstep::native {

Tensor gather(const Tensor& self, int64_t dim, const Tensor& index);
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
void scatter_add_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);

}  // namespace lockstep::native
