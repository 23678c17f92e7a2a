// lockstep.h — the umbrella header: #include <lockstep.h> gives the whole public API.
// See README.md for the reading order and docs/api.md for the API at a glance.
#pragma once

#include "core/allocator.h"
#include "core/autocast.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/conv_transpose.h"
#include "core/factory.h"
#include "core/from_blob.h"
#include "core/losses.h"
#include "core/grad_mode.h"
#include "core/nn_ops.h"
#include "core/parallel.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "core/rng_state.h"
#include "core/tensor.h"
#include "core/tensor_functions.h"
#include "core/tensor_options.h"
#include "core/timeline.h"

#include "autograd/accumulate_grad.h"
#include "autograd/checkpoint.h"
#include "autograd/engine.h"
#include "autograd/functions/unbind.h"
#include "autograd/grad.h"
#include "autograd/graph_traversal.h"
#include "autograd/node.h"

#include "nn/nn.h"

#include "data/data.h"

#include "optim/optim.h"

#include "distributed/distributed.h"

#include "models/models.h"
