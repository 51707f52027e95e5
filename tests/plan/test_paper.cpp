// The model against the paper (SPEC §5): with one stated parameter set (hardware/a100-80g.json),
// the predicted step-time ratios dense-tp/btp and naive-tp/btp stay within 20% of the paper's
// measured ratios on every row. The absolute times are not asserted: the paper does not state its
// micro-batch count per iteration, and its pipelined rows are faster than any 1F1B schedule of
// its stated shapes allows (see the plan note).
#include <gtest/gtest.h>

#include "plan/paper.h"

namespace boostlm::plan {
namespace {

TEST(PlanPaper, RatiosWithinTwentyPercentOnEveryRow) {
  const Hardware a100 = load_hardware("a100-80g");
  for (const PaperPrediction& p : predict_paper(a100)) {
    const double paper_dense = p.row.dense_s / p.row.btp_s;
    const double paper_naive = p.row.naive_s / p.row.btp_s;
    const double dense = p.dense.step_s / p.btp.step_s;
    const double naive = p.naive.step_s / p.btp.step_s;
    EXPECT_NEAR(dense / paper_dense, 1.0, 0.2) << p.row.name << " dense-tp/btp " << dense;
    EXPECT_NEAR(naive / paper_naive, 1.0, 0.2) << p.row.name << " naive-tp/btp " << naive;
  }
}

// The paper's GEMM utilisation claim (59% under naive-tp, 70–75% under BTP at 7B, TP 4) is what
// set the A100 curve; the model must keep reproducing it within a few points.
TEST(PlanPaper, GemmUtilisationOfTheSevenBillionRow) {
  const Hardware a100 = load_hardware("a100-80g");
  const PaperRow& row = paper_rows()[2];
  ASSERT_EQ(row.name, "7b");
  const double naive =
      predict_step(a100, paper_step(row, LayoutKind::naive_tp, 1)).gemm_utilisation;
  const double btp = predict_step(a100, paper_step(row, LayoutKind::btp, 1)).gemm_utilisation;
  EXPECT_NEAR(naive, 0.59, 0.03);
  EXPECT_GT(btp, 0.67);
  EXPECT_LT(btp, 0.78);
}

}  // namespace
}  // namespace boostlm::plan
