#include "parallel/sharding.h"

#include <algorithm>
#include <cstring>

#include "core/buffer.h"
#include "core/error.h"
#include "kernels/elementwise.h"

namespace boostlm {

namespace {
// The tensor as [outer, axis, inner]: rows of the split axis with `inner` contiguous elements.
struct Split {
  int64_t outer = 1, full_axis = 1, local_axis = 1, inner = 1;
};

Split split_of(const ParamInfo& info) {
  Split s;
  for (int d = 0; d < static_cast<int>(info.shape.size()); ++d) {
    if (d < info.shard_axis) s.outer *= info.shape[d];
    if (d > info.shard_axis) s.inner *= info.shape[d];
  }
  s.full_axis = info.shape[info.shard_axis];
  s.local_axis = info.local_shape[info.shard_axis];
  return s;
}
}  // namespace

void gather_tensor(const ParamInfo& info, const float* local, float* full, Communicator& tp) {
  if (info.shard_axis < 0) {
    copy_values(local, info.numel, full);
    return;
  }
  const Split s = split_of(info);
  BOOSTLM_ASSERT(s.local_axis * tp.size() == s.full_axis);
  if (s.outer == 1) {  // the shards are contiguous blocks of the full tensor, in rank order
    tp.all_gather(local, info.numel, full);
    return;
  }
  Buffer<float> parts(info.numel * tp.size());
  tp.all_gather(local, info.numel, parts.data());
  // Each rank's shard is [outer, run]; the full tensor is [outer, t·run] with the shards side by
  // side (run: contiguous elements per outer index and rank).
  concat_columns(parts.data(), tp.size(), s.outer, s.local_axis * s.inner, full);
}

void slice_tensor(const ParamInfo& info, const float* full, float* local) {
  if (info.shard_axis < 0) {
    std::memcpy(local, full, info.numel * sizeof(float));
    return;
  }
  const Split s = split_of(info);
  const int64_t run = s.local_axis * s.inner;
  for (int64_t o = 0; o < s.outer; ++o)
    std::copy_n(full + o * s.full_axis * s.inner + info.shard_begin * s.inner, run,
                local + o * run);
}

}  // namespace boostlm
