// core/native/fast/onednn_engine.h — the process-wide oneDNN CPU engine and this thread's stream.
//
// Every oneDNN primitive lockstep runs (the float32 convolutions of
// conv_onednn.cpp, the bfloat16 GEMM and convolutions) executes on this one
// engine; each thread has its own stream, so threads never share one.
// Read before: core/native/fast/conv_onednn.h. Read next: core/native/gemm_bf16.h.
#pragma once

#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/tensor.h"

namespace lockstep::native::onednn_detail {

dnnl::engine& cpu_engine();
dnnl::stream& thread_stream();

// Whether oneDNN runs its AMX kernels on this CPU (amx_bf16; without it the bf16
// primitives are its AVX-512-BF16 ones, whose strengths differ: Note [bf16
// backward-weights as one GEMM] in conv_bf16_weight_grad.cpp).
bool has_amx();

// Whether oneDNN has bfloat16 primitives on this CPU (Note [bf16 without oneDNN
// kernels] in gemm_bf16_via_float32.cpp): oneDNN 2.6 builds bf16 matmuls and convolutions on
// AVX-512 CPUs only (AVX512-BF16 and AMX natively, plain AVX-512 by emulation), so
// an AVX2 machine has none. Found by building one small bf16 matmul, once;
// LOCKSTEP_ONEDNN_BF16=0 answers false anywhere (to test the other path).
bool has_bf16();

// Primitives take their scratch memory from the caller (Note [oneDNN scratch memory] in
// conv_onednn.cpp): the attribute that says so, and the scratch of `desc`'s size added
// to `args`, kept alive by `keep` (nothing when the primitive needs none).
dnnl::primitive_attr user_scratchpad();
void add_scratchpad(std::unordered_map<int, dnnl::memory>& args, const dnnl::memory::desc& desc,
                    Tensor& keep);

}  // namespace lockstep::native::onednn_detail
