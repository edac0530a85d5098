// Gradient clipping by global L2 norm, as torch.nn.utils.clip_grad_norm_: the norm of all
// gradients together is computed on the device (kernels/norm.tile's sum of squares per row of
// each flat gradient buffer, then reduce_rows over the partial sums), and when it exceeds
// max_norm every gradient is scaled by max_norm / (norm + 1e-6) in one launch per group.
//
//   TESSEL_ASSIGN_OR_RETURN(double norm, clip_grad_norm(params, 1.0));   // the norm before
#pragma once

#include "nn/module.h"

namespace tessel::optim {

// sqrt(sum of every gradient element squared), summed in f32 per group, then in double. A
// group's length must be a multiple of kAlignElements or a whole fraction of it (a ZeRO shard).
Expected<double> global_grad_norm(const nn::FlatParameters& params);
// Returns the norm before clipping. max_norm must be > 0.
Expected<double> clip_grad_norm(const nn::FlatParameters& params, double max_norm);
// Multiplies every gradient by `factor` (what clipping does once it knows the norm; data-parallel
// ZeRO clips its shards by a norm all-reduced over the ranks).
Status scale_grads(const nn::FlatParameters& params, double factor);

}  // namespace tessel::optim
