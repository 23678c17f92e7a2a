// data/data.h — the data layer in one include: datasets, samplers, DataLoader.
// Read in this order: dataset.h, idx.h, transforms.h, map_dataset.h, mnist.h,
// fashion_mnist.h, synthetic.h, sampler.h, data_loader.h.
#pragma once

#include "data/data_loader.h"
#include "data/dataset.h"
#include "data/fashion_mnist.h"
#include "data/idx.h"
#include "data/map_dataset.h"
#include "data/mnist.h"
#include "data/sampler.h"
#include "data/synthetic.h"
#include "data/transforms.h"
