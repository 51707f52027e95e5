#include "comm/grid.h"

#include <mpi.h>

#include "comm/mpi_runtime.h"
#include "core/error.h"

namespace boostlm {
namespace {

// The ranks of MPI_COMM_WORLD with the same colour form one group, ordered by key.
Communicator split_world(int color, int key, std::string name) {
  MPI_Comm part = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, color, key, &part);
  Communicator group(static_cast<void*>(part), std::move(name));  // holds its own duplicate
  MPI_Comm_free(&part);
  return group;
}

GroupSetup g_group_setup = nullptr;

std::string flags(const GridShape& s) {
  return "--tp " + std::to_string(s.tp) + " --pp " + std::to_string(s.pp) + " --dp " +
         std::to_string(s.dp);
}

}  // namespace

void set_group_setup(GroupSetup setup) { g_group_setup = setup; }

ProcessGrid::ProcessGrid() = default;

ProcessGrid::ProcessGrid(GridShape shape) : shape_(shape) {
  if (shape.tp < 1 || shape.pp < 1 || shape.dp < 1) {
    throw error("process grid ", flags(shape), ": every size must be at least 1");
  }
  const int ranks = shape.world();
  if (!mpi_active()) {
    if (ranks == 1) return;  // the single-process grid: every group is this process alone
    const std::string n = std::to_string(ranks);
    throw error(flags(shape), " needs ", n, " ranks but boostlm is running as a single process; ",
                "launch it with `boostlm launch -n ", n, " -- <command> ...` or `mpirun -n ", n,
                " boostlm <command> ...`");
  }
  if (ranks != mpi_world_size()) {
    throw error(flags(shape), " needs ", ranks, " ranks but the job has ", mpi_world_size());
  }

  // SPEC §3: world rank = pp_rank·(dp·tp) + dp_rank·tp + tp_rank (TP innermost, PP outermost).
  world_ = Communicator(static_cast<void*>(MPI_COMM_WORLD), "world");
  world_rank_ = world_.rank();
  const int tp_rank = world_rank_ % shape.tp;
  const int dp_rank = world_rank_ / shape.tp % shape.dp;
  const int pp_rank = world_rank_ / (shape.tp * shape.dp);
  // Colour = the coordinates the group's members share, key = the coordinate along the group.
  tp_ = split_world(pp_rank * shape.dp + dp_rank, tp_rank, "tp");
  dp_ = split_world(pp_rank * shape.tp + tp_rank, dp_rank, "dp");
  pp_ = split_world(dp_rank * shape.tp + tp_rank, pp_rank, "pp");

  BOOSTLM_ASSERT(tp_.size() == shape.tp && tp_.rank() == tp_rank);
  BOOSTLM_ASSERT(dp_.size() == shape.dp && dp_.rank() == dp_rank);
  BOOSTLM_ASSERT(pp_.size() == shape.pp && pp_.rank() == pp_rank);
  if (g_group_setup)
    for (Communicator* group : {&world_, &tp_, &dp_, &pp_})
      if (group->size() > 1) g_group_setup(*group);
}

}  // namespace boostlm
