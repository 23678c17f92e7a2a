// core/cuda/cudnn_check.h — LS_CUDNN_CHECK, which turns a failed cuDNN call into an
// ls::Error naming the call, cuDNN's reason and where it happened.
// Read before: core/cuda/cuda_context.h. Read next: core/cuda/conv_cudnn.cpp.
#pragma once

#include <cudnn.h>

#include "core/error.h"

// Throws ls::Error naming the cuDNN call and its status.
#define LS_CUDNN_CHECK(expr)                                                                    \
  do {                                                                                          \
    const cudnnStatus_t ls_cudnn_status_ = (expr);                                              \
    LS_CHECK(ls_cudnn_status_ == CUDNN_STATUS_SUCCESS, "cuDNN call ", #expr,                    \
             " failed: ", cudnnGetErrorString(ls_cudnn_status_), " (", __FILE__, ":", __LINE__, \
             "); check the operands' shapes, and that the GPU has memory left");                \
  } while (0)
