// Refusing what cannot fit: the estimate grows with the model and the batch, and the refusal
// gives the figures and the ways out.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/config.h"
#include "model/params.h"
#include "train/memory_check.h"

namespace boostlm {
namespace {

ModelConfig load_preset(const char* name) {
  return ModelConfig::load(std::string(BOOSTLM_SOURCE_DIR) + "/configs/" + name);
}

TEST(MemoryCheck, SevenBillionParametersNeedTensOfGigabytes) {
  TrainOptions o;
  o.batch_size = 1;
  o.seq_len = 256;
  const ModelConfig c = load_preset("7b-dense.json");
  const RankMemoryNeed need = estimate_rank_memory(o, c, LayoutKind::dense_tp, 1000);
  // 6.7B parameters: weights, gradients and two moments alone are 16 bytes each.
  EXPECT_GT(need.model_state, 6.0e9 * 16);
  EXPECT_GT(need.checkpoint, 6.0e9 * 12);
  // The same model over TP 4 holds a quarter of the model state per rank.
  o.grid.tp = 4;
  EXPECT_LT(estimate_rank_memory(o, c, LayoutKind::dense_tp, 1000).model_state,
            need.model_state / 3.9);
}

// Per-projection ranks (issue 31): the model state counts each family's factors at its own rank,
// exactly the parameters the model has (fp32 weights, gradients and two AdamW moments).
TEST(MemoryCheck, CountsEachFamilysRank) {
  TrainOptions o;
  o.batch_size = 1;
  o.seq_len = 64;
  ModelConfig c = load_preset("60m-cola.json");
  c.set_ranks({256, 64, 64, 192, 320, 320, 384});
  c.validate();
  const double params = static_cast<double>(build_param_table(c).total_elements());
  EXPECT_DOUBLE_EQ(estimate_rank_memory(o, c, LayoutKind::btp, 1000).model_state, 16 * params);
  ModelConfig uniform = load_preset("60m-cola.json");
  EXPECT_LT(estimate_rank_memory(o, uniform, LayoutKind::btp, 1000).model_state, 16 * params);
}

TEST(MemoryCheck, RefusesWithTheFiguresAndFitsWhatFits) {
  TrainOptions o;
  RankMemoryNeed need;
  need.model_state = 6.0 * (1 << 30);
  need.activations = 2.0 * (1 << 30);
  EXPECT_NO_THROW(check_memory_fits(need, 1, 9.0 * (1 << 30), o));
  EXPECT_NO_THROW(check_memory_fits(need, 4, 0, o));  // unknown: not refused
  try {
    check_memory_fits(need, 2, 9.0 * (1 << 30), o);
    ADD_FAILURE() << "two ranks of 8 GiB fit in 9 GiB";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("needs about 8.00 GiB per rank"), std::string::npos) << m;
    EXPECT_NE(m.find("2 ranks on this machine need 16"), std::string::npos) << m;
    EXPECT_NE(m.find("9.00 GiB available"), std::string::npos) << m;
    EXPECT_NE(m.find("--recompute block"), std::string::npos) << m;
  }
}

TEST(MemoryCheck, ReadsWhatThisMachineHas) {
  EXPECT_GT(available_memory_bytes(), 64.0 * (1 << 20));
  EXPECT_GE(ranks_on_this_machine(), 1);
}

}  // namespace
}  // namespace boostlm
