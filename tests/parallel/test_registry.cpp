// The layout registry: each layout says what it is once, and the formulas and the planner follow
// its properties rather than its name.
#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "parallel/comm_formulas.h"
#include "parallel/layout.h"
#include "plan/memory.h"
#include "test_util.h"

namespace boostlm {
namespace {

TEST(LayoutRegistry, NamesParseBackAndArchitecturesSplitTheLayouts) {
  std::set<std::string> names;
  for (const LayoutTraits& t : layout_registry()) {
    EXPECT_TRUE(names.insert(t.name).second) << "duplicate name " << t.name;
    EXPECT_EQ(parse_layout(t.name), t.kind);
    EXPECT_EQ(to_string(t.kind), t.name);
    EXPECT_EQ(&layout_traits(t.kind), &t);
  }
  EXPECT_EQ(layout_names().size(), layout_registry().size());
  EXPECT_EQ(layouts_for(true).size() + layouts_for(false).size(), layout_registry().size());
  try {
    parse_layout("fourth-tp");
    ADD_FAILURE();
  } catch (const Error& e) {
    for (const std::string& name : layout_names())
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

// Pipeline boundaries, the planner's residual width and the block norms follow the
// hidden-sharded-residual property of each registered layout.
// A shape a TP size does not divide is refused with what would work (issue 61: the 1b preset's
// d_ff=5461 at --tp 2): the nearest values that divide, and the TP sizes that divide it.
TEST(LayoutRegistry, RefusalNamesTheNearestShapeThatWorks) {
  ModelConfig c = small_model(Arch::cola);
  c.d_ff = 5461;
  try {
    check_layout(LayoutKind::btp, c, 2);
    FAIL() << "d_ff=5461 at tp=2 was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("d_ff=5461 is not divisible by tp=2"), std::string::npos) << what;
    EXPECT_NE(what.find("5460 and 5462"), std::string::npos) << what;
    EXPECT_NE(what.find("(up to 8: 1)"), std::string::npos) << what;
  }
}

TEST(LayoutRegistry, TrafficAndMemoryFollowTheProperties) {
  for (const LayoutTraits& t : layout_registry()) {
    const ModelConfig c = small_model(t.low_rank ? Arch::cola : Arch::dense);
    const int tp = 2;
    const int64_t N = 64;
    const int64_t columns = t.hidden_sharded_residual ? c.d_model / tp : c.d_model;
    const CommCounts p2p = pipeline_p2p_comm(t.kind, c, N, tp, 2, 0, 1, false);
    EXPECT_EQ(p2p[Collective::send].bytes, N * columns * 4) << t.name;
    plan::MicroBatchShape mb{t.kind, c, {}, 1, N, tp};
    EXPECT_EQ(plan::residual_columns(mb), columns) << t.name;
    const int64_t norm_elements = t.hidden_sharded_residual ? 2 * c.d_model / tp : 2 * c.d_model;
    int64_t projections = 0;
    for (const auto& p : block_projections(c))
      projections += p.rank == 0 ? p.d_in * p.d_out : p.rank * (p.d_in + p.d_out);
    EXPECT_EQ(plan::block_param_elements(t.kind, c, tp), projections / tp + norm_elements)
        << t.name;
  }
}

}  // namespace
}  // namespace boostlm
