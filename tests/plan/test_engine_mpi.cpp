// The model's counts against the engine's at TP 2 and 4, under mpirun: the TP collectives a
// training step counts (calls and bytes per kind), the parameter shard of each rank, and the
// activation bytes the engine holds and keeps per block.
#include <gtest/gtest.h>

#include "comm/grid.h"
#include "comm/mpi_runtime.h"
#include "plan/memory.h"
#include "plan_test_util.h"

namespace boostlm::plan {
namespace {

TEST(PlanEngineUnderMpi, StepCommunicationAndMemoryMatchTheModel) {
  const int world = mpi_world_size();
  if (world == 1) GTEST_SKIP() << "needs MPI: ctest runs plan_np2 and plan_np4 under mpirun";
  const int64_t B = 2, T = 8;
  for (const test::LayoutCase& lc : test::layout_cases()) {
    for (int tp : {2, 4}) {
      if (world % tp != 0 || lc.kv_heads % tp != 0) continue;
      const MicroBatchShape mb = test::micro_batch(lc, B, T, tp);
      ProcessGrid grid(GridShape{tp, 1, world / tp});
      Model model(mb.config, DType::f32, lc.layout, &grid.tp(), lc.options);
      model.init_weights(3);
      const auto tokens = random_tokens(B * T, mb.config.vocab_size, 1);
      grid.tp().reset_counts();
      model.forward_backward(tokens.data(), tokens.data(), B, T);
      const CommCounts engine = grid.tp().counts(), modelled = whole_model_work(mb).tp;
      SCOPED_TRACE(test::case_name(lc) + " tp=" + std::to_string(tp));
      for (int k = 0; k < kCollectiveKinds; ++k) {
        EXPECT_EQ(modelled.by_kind[k].calls, engine.by_kind[k].calls) << k;
        EXPECT_EQ(modelled.by_kind[k].bytes, engine.by_kind[k].bytes) << k;
      }
      EXPECT_EQ(stage_param_elements(lc.layout, mb.config, tp, 1, 0),
                model.params().parameter_count());
      EXPECT_EQ(4 * model_activation_elements(mb), model.activation_bytes());
      EXPECT_EQ(4 * block_kept_elements(mb), model.kept_bytes_per_block());
    }
  }
}

}  // namespace
}  // namespace boostlm::plan
