// nn/nn.h — the nn layer's public headers in one include (lockstep.h includes it).
// Read before: nn/module.h. Read next: any layer below.
#pragma once

#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/batch_norm.h"
#include "nn/conv.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/expanding_array.h"
#include "nn/flatten.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/module_list.h"
#include "nn/pooling.h"
#include "nn/sequential.h"
#include "nn/serialize.h"
#include "nn/transformer.h"
#include "nn/unary_module.h"
