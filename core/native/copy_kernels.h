// core/native/copy_kernels.h — the CPU loops behind copy_ (and so contiguous,
// clone and to_dtype): which loop a copy takes, and the loops.
//
// § Note [Copy loops]
// A copy converts element by element with convert<D> (core/dtype.h) whatever
// the layout; only the loop differs, chosen from the two stride patterns:
//   Flat        both contiguous, one shape: one loop split over the threads
//               (to_dtype, the autocast casts of every weight once per step);
//   Rows        the last dim contiguous on both sides: a row at a time, memmove
//               or the conversion loop (a permuted view made contiguous: BERT's
//               attention heads);
//   Transposed  dst contiguous, src's last two dims swapped: 32 x 32 tiles read
//               down the source's columns, or, when only bytes move (one dtype
//               of 2 or 4 bytes), 16 x 16 tiles transposed in AVX-512 registers
//               (8 x 8 in AVX2 ones), and between bf16 and float32 8 x 8 tiles
//               converted on the way with AVX2 (Note [Transposing in
//               registers], fast/transpose_tiles.cpp);
//   Walk        anything else: the offset walk of for_each_offset, element by
//               element — the reference the others are tested against
//               (copy_reference_, tests/core/test_bf16_kernels.cpp).
// The walk is slow (an offset computation per element): before the other loops
// the weights' casts and transposes were a visible share of a bf16 step
// (measured: docs/results/kernel_choices.md).
// A bfloat16 destination is rounded through its bits (store_element) so that the
// flat and row loops vectorise; the values are convert<D>'s either way.
// Before choosing, copy_ puts both sides in the destination's memory order and
// merges the dims that are contiguous in both (in_dst_order): so a copy between
// channels-last and NCHW (contiguous() of a channels-last activation, or
// channels_last() of an NCHW one) is a batch of (C, H W) transposes, and a copy
// between two channels-last tensors (to_dtype) is flat.
// Read before: core/native/native.h (copy_), core/native/memory.cpp. Read next: core/native/views.cpp.
#pragma once

#include "core/tensor.h"

namespace lockstep::native {

enum class CopyPath { Flat, Rows, Transposed, Walk };

// dst = src as the loops see it: dst viewed in its memory order (dims sorted by
// dst's strides, outermost first), size-1 dims dropped, dims contiguous in both
// merged; src_strides permuted and merged alike. Same elements, same pairs.
struct CopyViews {
  Tensor dst;
  IntList src_strides;
};
CopyViews in_dst_order(const Tensor& dst, const IntList& src_strides);

// The loop copy_ takes for dst = src, src read with `src_strides` (broadcast to dst's shape).
CopyPath copy_path(const Tensor& dst, const Tensor& src, const IntList& src_strides);

void copy_flat(const Tensor& dst, const Tensor& src);
void copy_rows(const Tensor& dst, const Tensor& src, const IntList& src_strides);
void copy_transposed(const Tensor& dst, const Tensor& src, const IntList& src_strides);
void copy_walk(const Tensor& dst, const Tensor& src, const IntList& src_strides);

// dst = src by the walk alone, whatever the layouts (the reference, for tests).
void copy_reference_(const Tensor& dst, const Tensor& src);

}  // namespace lockstep::native
