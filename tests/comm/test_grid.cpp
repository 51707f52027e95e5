// The process grid: which world ranks share each TP, DP and PP group (SPEC §3: TP innermost, PP
// outermost), and the errors for a shape that does not fit the job.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <string>
#include <vector>

#include "comm/grid.h"
#include "comm/mpi_runtime.h"
#include "comm_test_util.h"
#include "core/error.h"

namespace boostlm {
namespace {

using Groups = std::vector<std::vector<int>>;  // world ranks of each group, in group-rank order

struct GridCase {
  GridShape shape;
  Groups tp, dp, pp;
};

// Written out by hand from world = pp·(dp·tp) + dp·tp + tp, not computed by the same formula.
const std::vector<GridCase>& grid_cases() {
  static const std::vector<GridCase> cases = {
      {{1, 1, 1}, {{0}}, {{0}}, {{0}}},
      {{2, 1, 1}, {{0, 1}}, {{0}, {1}}, {{0}, {1}}},
      {{1, 1, 2}, {{0}, {1}}, {{0, 1}}, {{0}, {1}}},
      {{2, 1, 2}, {{0, 1}, {2, 3}}, {{0, 2}, {1, 3}}, {{0}, {1}, {2}, {3}}},
      {{1, 2, 2}, {{0}, {1}, {2}, {3}}, {{0, 1}, {2, 3}}, {{0, 2}, {1, 3}}},
      {{4, 1, 1}, {{0, 1, 2, 3}}, {{0}, {1}, {2}, {3}}, {{0}, {1}, {2}, {3}}},
  };
  return cases;
}

std::string describe(const GridShape& s) {
  return "tp=" + std::to_string(s.tp) + " pp=" + std::to_string(s.pp) +
         " dp=" + std::to_string(s.dp);
}

// The world ranks of this rank's group, in group-rank order, as the group itself reports them.
std::vector<int> members(Communicator& group, int world_rank) {
  const float mine = static_cast<float>(world_rank);
  std::vector<float> all(group.size());
  group.all_gather(&mine, 1, all.data());
  return std::vector<int>(all.begin(), all.end());
}

std::vector<int> group_of(const Groups& groups, int world_rank) {
  for (const auto& g : groups) {
    if (std::find(g.begin(), g.end(), world_rank) != g.end()) return g;
  }
  return {};
}

void expect_group(Communicator& group, int group_rank, const Groups& expected, int world_rank,
                  const std::string& what) {
  const std::vector<int> want = group_of(expected, world_rank);
  ASSERT_FALSE(want.empty()) << what << ": world rank " << world_rank << " is in no group";
  EXPECT_EQ(group.size(), static_cast<int>(want.size())) << what;
  EXPECT_EQ(members(group, world_rank), want) << what;
  EXPECT_EQ(want[group_rank], world_rank) << what << ": group rank " << group_rank;
}

TEST(Grid, GroupsFollowTheSpecLayout) {
  REQUIRE_MPI();
  const int ranks = mpi_world_size();
  int checked = 0;
  for (const GridCase& c : grid_cases()) {
    if (c.shape.world() != ranks) continue;  // those are Errors: ShapeMismatchIsAnError
    SCOPED_TRACE(describe(c.shape));
    ProcessGrid grid(c.shape);
    const int w = grid.world_rank();
    EXPECT_EQ(w, mpi_world_rank());
    EXPECT_EQ(grid.world().size(), ranks);
    EXPECT_EQ(grid.tp().name(), "tp");
    EXPECT_EQ(grid.dp().name(), "dp");
    EXPECT_EQ(grid.pp().name(), "pp");
    expect_group(grid.tp(), grid.tp_rank(), c.tp, w, "tp");
    expect_group(grid.dp(), grid.dp_rank(), c.dp, w, "dp");
    expect_group(grid.pp(), grid.pp_rank(), c.pp, w, "pp");
    // A collective on one group is counted on that group's communicator only.
    if (grid.tp().size() > 1) {
      EXPECT_EQ(grid.tp().counts()[Collective::all_gather].calls, 1);
      EXPECT_EQ(grid.world().counts().total_calls(), 0);
    }
    ++checked;
  }
  if (ranks == 1 || ranks == 2 || ranks == 4) {
    EXPECT_GE(checked, 1) << "no shape for " << ranks;
  }
}

TEST(Grid, ShapeMismatchIsAnError) {
  REQUIRE_MPI();
  const int ranks = mpi_world_size();
  int checked = 0;
  for (const GridCase& c : grid_cases()) {
    if (c.shape.world() == ranks) continue;
    const std::string want = "--tp " + std::to_string(c.shape.tp) + " --pp " +
                             std::to_string(c.shape.pp) + " --dp " + std::to_string(c.shape.dp) +
                             " needs " + std::to_string(c.shape.world()) +
                             " ranks but the job has " + std::to_string(ranks);
    try {
      ProcessGrid grid(c.shape);
      ADD_FAILURE() << describe(c.shape) << ": no Error with " << ranks << " ranks";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), want);
    }
    ++checked;
  }
  EXPECT_GE(checked, 3);
  EXPECT_THROW(ProcessGrid(GridShape{0, 1, ranks}), Error);
  EXPECT_THROW(ProcessGrid(GridShape{1, -1, 1}), Error);
}

TEST(SerialGrid, WithoutMpiOnlyOneProcess) {
  if (launched_by_mpi()) GTEST_SKIP() << "runs without mpirun (ctest: comm_serial)";
  auto expect_single = [](ProcessGrid& grid) {
    EXPECT_EQ(grid.shape().world(), 1);
    EXPECT_EQ(grid.world_rank(), 0);
    EXPECT_EQ(grid.tp_rank() + grid.dp_rank() + grid.pp_rank(), 0);
    EXPECT_EQ(grid.world().size() * grid.tp().size() * grid.dp().size() * grid.pp().size(), 1);
  };
  ProcessGrid single;
  expect_single(single);
  ProcessGrid one_by_one(GridShape{1, 1, 1});
  expect_single(one_by_one);
  try {
    ProcessGrid grid(GridShape{2, 1, 2});
    ADD_FAILURE() << "a 4-rank grid without MPI must be an Error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("--tp 2 --pp 1 --dp 2 needs 4 ranks"), std::string::npos) << message;
    EXPECT_NE(message.find("boostlm launch -n 4"), std::string::npos) << message;
  }
  EXPECT_FALSE(mpi_active());
}

}  // namespace
}  // namespace boostlm
