// models/models.h — umbrella header of the models layer.
#pragma once

#include "models/bert.h"
#include "models/resnet.h"
#include "models/small_cnn.h"
