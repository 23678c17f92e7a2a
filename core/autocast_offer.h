// core/autocast_offer.h — bf16 copies of activations handed to the autocast cast by
// the op that wrote the activation, so that the cast has nothing left to convert.
// Used by ops, not by user code (core/autocast.h is the public side).
//
// Read before: core/autocast.h. Read next: core/autocast.cpp (cached_cast).
#pragma once

#include <cstddef>

#include "core/tensor.h"

namespace lockstep::autocast {

// § Note [bf16 copies written by the op that made the activation]
// A float32 activation that a bf16 op reads next (a post-norm transformer's LayerNorm
// output, read by the next linear) is converted by cached_cast on every use: a pass
// that reads 4 bytes an element and writes 2. An op that writes such an activation
// can write its bf16 copy in the same pass and offer it here; the next cached_cast of
// that tensor (same TensorImpl, same storage version, same dtype and shape) under the
// same outermost guard takes the copy instead of converting, and the offer is used up.
// The copy holds the values the cast would have written (round to nearest even), so
// nothing downstream changes. An offer that no cast takes is dropped when the tensor
// dies (checked when offers pile up) or when the outermost guard ends.
// dropout_add_layer_norm offers its output's copy (Note [dropout + residual add +
// LayerNorm in one pass] in autograd/functions/autocast_fused_dropout.h).

// Offers `cast`, t converted to cast.dtype(), to the next cached_cast(t, cast.dtype())
// of this thread. A no-op outside an enabled guard.
void offer_cast(const Tensor& t, const Tensor& cast);
// Offers not yet taken on this thread (tests).
size_t offered_cast_count();

}  // namespace lockstep::autocast
