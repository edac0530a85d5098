// Everything a program needs to define, train, save and load a model on tessel, in one include:
//
//   #include <tessel/tessel.h>
//   find_package(tessel CONFIG REQUIRED) ... target_link_libraries(app PRIVATE tessel::tessel)
//
// Devices and tensors, the autograd ops and operators, modules and layers, optimizers, schedules
// and clipping, checkpoints, logging. The trainer, data sets, collectives and the tile compiler
// have their own headers (<tessel/train/trainer.h>, <tessel/dist/process_group.h>, ...).
#pragma once

#include "autograd/functional.h"
#include "autograd/variable.h"
#include "io/safetensors.h"
#include "io/training_checkpoint.h"
#include "nn/conv_layers.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "optim/clip.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "runtime/device.h"
#include "runtime/tensor.h"
#include "support/log.h"
#include "support/random.h"
#include "support/status.h"
