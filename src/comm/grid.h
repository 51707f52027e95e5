// The process grid TP × PP × DP (SPEC §3): TP innermost, so neighbouring ranks share a TP group,
// and PP outermost. world rank = pp_rank·(dp·tp) + dp_rank·tp + tp_rank.
#pragma once

#include <string>

#include "comm/communicator.h"

namespace boostlm {

struct GridShape {
  int tp = 1, pp = 1, dp = 1;
  int world() const { return tp * pp * dp; }
};

// What a backend with memory of its own does to each group of a new grid of several processes
// (the CUDA backend gives it a device transport, comm/cuda_transport.h); collective over the group.
using GroupSetup = void (*)(Communicator& group);
void set_group_setup(GroupSetup setup);

class ProcessGrid {
 public:
  // The grid of a single process (no MPI).
  ProcessGrid();
  // Splits MPI_COMM_WORLD; throws Error if shape.world() differs from the number of ranks.
  explicit ProcessGrid(GridShape shape);

  const GridShape& shape() const { return shape_; }
  int world_rank() const { return world_rank_; }
  int tp_rank() const { return tp_.rank(); }
  int dp_rank() const { return dp_.rank(); }
  int pp_rank() const { return pp_.rank(); }
  Communicator& world() { return world_; }
  Communicator& tp() { return tp_; }
  Communicator& dp() { return dp_; }
  Communicator& pp() { return pp_; }

 private:
  GridShape shape_;
  int world_rank_ = 0;
  Communicator world_, tp_, dp_, pp_;
};

}  // namespace boostlm
