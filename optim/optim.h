// optim/optim.h — the optim layer in one include: optimizers, LR schedulers and
// gradient clipping. Read in this order: optimizer.h (base, state dicts, Note
// [Undefined gradients are skipped]), sgd.h, adam.h, lr_scheduler.h, clip_grad.h.
#pragma once

#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "optim/serialize.h"
#include "optim/sgd.h"
