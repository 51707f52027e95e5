// The run's saved settings: what a checkpoint records, how a resume restores and overrides them.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "train/run_settings.h"

namespace boostlm {
namespace {

// Every setting away from its default, so that a setting dropped on the way shows.
TrainOptions unusual() {
  TrainOptions o;
  o.schedule = {"constant", 2e-3f, 2e-5f, 7, 1};
  o.steps = 90;
  o.schedule_steps = 120;
  o.precision = DType::bf16;
  o.batch_size = 3;
  o.seq_len = 24;
  o.grad_accum = 5;
  o.seed = 99;
  o.shuffle = true;
  o.layout = parse_layout("naive-tp");
  o.block = {false, false, Recompute::block};
  o.grid = {2, 1, 1};
  o.zero = 1;
  o.optimizer = {0.8f, 0.9f, 1e-6f, 0.2f, 0.7f};
  o.eval_interval = 11;
  o.eval_batches = 3;
  o.save_interval = 13;
  o.keep_checkpoints = 4;
  return o;
}

TrainingState state_with(const nlohmann::json& extra) {
  TrainingState state;
  state.extra = extra;
  return state;
}

TEST(RunSettings, AResumeRestoresEverySavedSetting) {
  const nlohmann::json saved = saved_run_settings(unusual());
  EXPECT_EQ(saved["lr"], 0.002);  // the float as typed, not 0.0020000000949949026
  EXPECT_EQ(saved["layout"], "naive-tp");
  TrainOptions resumed;
  restore_run_settings(resumed, state_with(saved), 2, "ckpt");
  EXPECT_EQ(saved_run_settings(resumed), saved);
  EXPECT_EQ(resumed.schedule.max_lr, 2e-3f);
  EXPECT_EQ(resumed.optimizer.eps, 1e-6f);
}

TEST(RunSettings, AGivenFlagWinsAndIsReported) {
  TrainOptions resumed;
  resumed.precision = DType::f32;
  resumed.grad_accum = 10;
  resumed.given = {"--precision", "--grad-accum"};
  const auto lines =
      restore_run_settings(resumed, state_with(saved_run_settings(unusual())), 2, "c");
  EXPECT_EQ(resumed.precision, DType::f32);
  EXPECT_EQ(resumed.grad_accum, 10);
  EXPECT_EQ(resumed.schedule.max_lr, 2e-3f);
  EXPECT_NE(std::find(lines.begin(), lines.end(),
                      "resume: --precision bf16 -> fp32 (given on the command line)"),
            lines.end());
  EXPECT_NE(std::find(lines.begin(), lines.end(),
                      "resume: --grad-accum 5 -> 10 (given on the command line)"),
            lines.end());
}

// The parallel sizes go together: one given (a restart on fewer ranks passes --dp) leaves the
// others at the command line's, and a job of another size cannot take the saved ones.
TEST(RunSettings, ParallelSizesAreRestoredTogetherOrNotAtAll) {
  const TrainingState state = state_with(saved_run_settings(unusual()));  // tp 2
  TrainOptions same_ranks;
  restore_run_settings(same_ranks, state, 2, "c");
  EXPECT_EQ(same_ranks.grid.tp, 2);
  TrainOptions one_rank;
  const auto lines = restore_run_settings(one_rank, state, 1, "c");
  EXPECT_EQ(one_rank.grid.tp, 1);
  EXPECT_NE(std::find(lines.begin(), lines.end(),
                      "resume: --tp 2 -> 1 (the default: this job has 1 rank(s), the checkpoint's "
                      "run had 2; the checkpoint reshards)"),
            lines.end());
  TrainOptions dp_given;
  dp_given.grid.dp = 2;
  dp_given.given = {"--dp"};
  restore_run_settings(dp_given, state, 2, "c");
  EXPECT_EQ(dp_given.grid.tp, 1);
  EXPECT_EQ(dp_given.grid.dp, 2);
}

TEST(RunSettings, RefusesMalformedSavedValuesNamingThem) {
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, nlohmann::json>>{{"lr", "fast"},
                                                           {"batch_size", 2.5},
                                                           {"seed", -1},
                                                           {"precision", "fp8"},
                                                           {"rmsnorm", "maybe"},
                                                           {"zero", 1e300}}) {
    TrainOptions o;
    try {
      restore_run_settings(o, state_with({{key, value}}), 1, "ckpt");
      ADD_FAILURE() << key << " = " << value.dump() << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("ckpt: the saved setting '" + key + "'"),
                std::string::npos)
          << e.what();
    }
  }
}

// A checkpoint from before the settings were saved: what it lacks stays as given, and the batch
// shape and data order come from the loader's state, which has always recorded them.
TEST(RunSettings, AnOlderCheckpointFallsBackToTheCommandLine) {
  TrainingState old = state_with({{"seed", 5}, {"layout", "btp"}, {"schedule_steps", 40}});
  old.loader = {{"step", 8}, {"batch_size", 4}, {"seq_len", 64}, {"shuffle", true}, {"seed", 5}};
  TrainOptions o;
  o.schedule.max_lr = 5e-3f;
  o.steps = 40;
  const auto lines = restore_run_settings(o, old, 1, "c");
  EXPECT_EQ(o.schedule.max_lr, 5e-3f);
  EXPECT_EQ(o.batch_size, 4);
  EXPECT_EQ(o.seq_len, 64);
  EXPECT_TRUE(o.shuffle);
  EXPECT_EQ(o.schedule_steps, 40);
  EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [](const std::string& line) {
    return line.find("predates saved --lr, --min-lr, --warmup") != std::string::npos;
  }));
}

}  // namespace
}  // namespace boostlm
