// core/native/conv_columns.h — the data movements around convolution GEMMs:
// im2col / col2im (Note [Convolution as a matrix product] in conv.cpp) and the
// (N, C, P) <-> (C, N, P) transposes of the batch-folded 1x1 GEMMs (Note [1x1
// convolutions as GEMMs] in fast/conv_1x1_gemm.h).
//
// im2col and col2im work on one image, the transposes on one tensor.
// Internal to core/native/conv*.cpp.
//
// Read before: core/native/conv_geometry.h. Read next: core/native/conv.cpp.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/native/conv_geometry.h"
#include "core/parallel.h"

namespace lockstep::native::conv_columns {

// cols (K, P) from one group's channels x (C_in_g, H, W).
template <class T>
void im2col(const T* x, const ConvGeometry& g, T* cols) {
  const int64_t p = g.p();
  for (int64_t c = 0; c < g.c_in_g(); ++c) {
    const T* plane = x + c * g.h * g.w;
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        T* row = cols + ((c * g.kh + ki) * g.kw + kj) * p;
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          T* out = row + oy * g.ow;
          const int64_t iy = oy * g.stride_h - g.pad_h + ki * g.dil_h;
          if (iy < 0 || iy >= g.h) {
            std::fill(out, out + g.ow, T(0));
            continue;
          }
          const T* src = plane + iy * g.w;
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            const int64_t ix = ox * g.stride_w - g.pad_w + kj * g.dil_w;
            out[ox] = (ix >= 0 && ix < g.w) ? src[ix] : T(0);
          }
        }
      }
    }
  }
}

// x (C_in_g, H, W) += the columns of cols (K, P) put back where im2col took
// them from; overlapping windows add up.
template <class T>
void col2im(const T* cols, const ConvGeometry& g, T* x) {
  const int64_t p = g.p();
  for (int64_t c = 0; c < g.c_in_g(); ++c) {
    T* plane = x + c * g.h * g.w;
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const T* row = cols + ((c * g.kh + ki) * g.kw + kj) * p;
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          const int64_t iy = oy * g.stride_h - g.pad_h + ki * g.dil_h;
          if (iy < 0 || iy >= g.h) continue;
          const T* in = row + oy * g.ow;
          T* dst = plane + iy * g.w;
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            const int64_t ix = ox * g.stride_w - g.pad_w + kj * g.dil_w;
            if (ix >= 0 && ix < g.w) dst[ix] += in[ox];
          }
        }
      }
    }
  }
}

// Offset of run (n, c) of p values in a (C, N, P) channel-major copy of an (N, C, P) tensor.
inline int64_t channel_major_offset(int64_t n, int64_t c, int64_t batch, int64_t p) {
  return (c * batch + n) * p;
}

// (N, C, P) <-> (C, N, P) for a float tensor; to_channel_major says which way.
inline void transpose_batch(const float* src, float* dst, int64_t batch, int64_t channels,
                            int64_t p, bool to_channel_major) {
  parallel_for(0, batch * channels, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t nc = lo; nc < hi; ++nc) {
      const int64_t n = nc / channels, c = nc % channels;
      const int64_t cm = channel_major_offset(n, c, batch, p);
      const float* from = src + (to_channel_major ? nc * p : cm);
      std::copy(from, from + p, dst + (to_channel_major ? cm : nc * p));
    }
  });
}

}  // namespace lockstep::native::conv_columns
