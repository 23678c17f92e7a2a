// core/native/conv_columns.h — the data movements around convolution GEMMs:
// im2col / col2im (Note [Convolution as a matrix product] in conv.cpp), the
// (N, C, P) <-> (C, N, P) transposes of the batch-folded 1x1 GEMMs (Note [1x1
// convolutions as GEMMs] in fast/conv_1x1_gemm.h), and im2row / row2im of the
// batch-folded small-output GEMMs (Note [Small-output convolutions as
// batch-folded GEMMs] in fast/conv_folded_gemm.h).
//
// im2col and col2im work on one image, the transposes and im2row / row2im on one tensor.
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

// dst[ix0 + i * step] += in[i] for i < count, skipping the positions outside
// [0, w): one image row of col2im and row2im.
template <class T>
void add_run(const T* in, int64_t count, int64_t ix0, int64_t step, int64_t w, T* dst) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t ix = ix0 + i * step;
    if (ix >= 0 && ix < w) dst[ix] += in[i];
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
          add_run(row + oy * g.ow, g.ow, kj * g.dil_w - g.pad_w, g.stride_w, g.w,
                  plane + iy * g.w);
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

// One window row of im2row: d[kj] = src[ix0 + kj * dil] for kj < kw, zero where
// the column falls outside [0, w).
inline void window_run(const float* src, int64_t ix0, int64_t kw, int64_t dil, int64_t w,
                       float* d) {
  if (dil == 1 && ix0 >= 0 && ix0 + kw <= w) {  // inside the image: one contiguous run
    std::copy(src + ix0, src + ix0 + kw, d);
    return;
  }
  for (int64_t kj = 0; kj < kw; ++kj) {
    const int64_t ix = ix0 + kj * dil;
    d[kj] = (ix >= 0 && ix < w) ? src[ix] : 0.0f;
  }
}

// rows (N P, K) from x (N, C_in, H, W), ungrouped: rows[n P + oy oW + ox, (c kH + ki) kW + kj]
// = x[n, c, oy sh - ph + ki dh, ox sw - pw + kj dw], zero in the padding.
inline void im2row(const float* x, const ConvGeometry& g, float* rows) {
  const int64_t p = g.p(), k = g.k(), taps = g.kh * g.kw;
  parallel_for(0, g.n * g.c_in, 4, [&](int64_t lo, int64_t hi) {
    for (int64_t nc = lo; nc < hi; ++nc) {
      const int64_t n = nc / g.c_in, c = nc % g.c_in;
      const float* plane = x + nc * g.h * g.w;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          float* window = rows + (n * p + oy * g.ow + ox) * k + c * taps;
          for (int64_t ki = 0; ki < g.kh; ++ki) {
            const int64_t iy = oy * g.stride_h - g.pad_h + ki * g.dil_h;
            float* d = window + ki * g.kw;
            if (iy < 0 || iy >= g.h) {
              std::fill(d, d + g.kw, 0.0f);
              continue;
            }
            window_run(plane + iy * g.w, ox * g.stride_w - g.pad_w, g.kw, g.dil_w, g.w, d);
          }
        }
      }
    }
  });
}

// im2row's adjoint: x (N, C_in, H, W) = the rows' entries added back where im2row
// took them from (overlapping windows add up); with `sum`, added to what x holds.
inline void row2im(const float* rows, const ConvGeometry& g, float* x, bool sum) {
  const int64_t p = g.p(), k = g.k(), taps = g.kh * g.kw;
  parallel_for(0, g.n * g.c_in, 4, [&](int64_t lo, int64_t hi) {
    for (int64_t nc = lo; nc < hi; ++nc) {
      const int64_t n = nc / g.c_in, c = nc % g.c_in;
      float* plane = x + nc * g.h * g.w;
      if (!sum) std::fill(plane, plane + g.h * g.w, 0.0f);
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const float* window = rows + (n * p + oy * g.ow + ox) * k + c * taps;
          for (int64_t ki = 0; ki < g.kh; ++ki) {
            const int64_t iy = oy * g.stride_h - g.pad_h + ki * g.dil_h;
            if (iy < 0 || iy >= g.h) continue;
            add_run(window + ki * g.kw, g.kw, ox * g.stride_w - g.pad_w, g.dil_w, g.w,
                    plane + iy * g.w);
          }
        }
      }
    }
  });
}

}  // namespace lockstep::native::conv_columns
