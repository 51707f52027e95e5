// Moving between a tensor's full form (SPEC §2, what checkpoints hold) and this rank's shard of it
// (ParamInfo's shard_axis / shard_begin / local_shape).
#pragma once

#include "comm/communicator.h"
#include "core/param_table.h"

namespace boostlm {

// full = the whole tensor, assembled from every TP rank's shard (a collective over `tp`; shards
// are equal-sized). For an unsharded tensor it copies. Both in device memory.
void gather_tensor(const ParamInfo& info, const float* local, float* full, Communicator& tp);

// local = this rank's slice of `full`, both in host memory (a named copy's staging: checkpoint and
// Hugging Face loading).
void slice_tensor(const ParamInfo& info, const float* full, float* local);

}  // namespace boostlm
