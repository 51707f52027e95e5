// The model's pieces against closed forms and against the engine in one process: FLOPs per GEMM
// against model_flops (SPEC §4), GEMM shapes against those the engine records, TP traffic against
// comm_formulas, parameters and activation memory against the engine's own accounting.
#include <gtest/gtest.h>

#include "model/flops.h"
#include "model/params.h"
#include "parallel/comm_formulas.h"
#include "plan/memory.h"
#include "plan_test_util.h"

namespace boostlm::plan {
namespace {

using test::layout_cases;
using test::LayoutCase;

double attention_forward_flops(const ModelConfig& c, int64_t B, int64_t T) {
  return model_flops(c, B, T).attention / c.n_layers;
}

// Every rank does 1/t of each projection's FLOPs (the layouts shard every projection), so
// t × one rank's block GEMM FLOPs is the block's share of model_flops; backward does twice the
// forward's. Attention: local heads under dense-tp and btp, all heads on every rank under
// naive-tp; backward 2.5× (recomputed probabilities).
TEST(PlanWorkload, BlockFlopsMatchModelFlopsAtEveryTpSize) {
  const int64_t B = 2, T = 8;
  for (const LayoutCase& lc : layout_cases()) {
    for (int t : {1, 2, 4}) {
      MicroBatchShape mb = test::micro_batch(lc, B, T, t);
      if (mb.config.n_kv_heads % t != 0) continue;
      const ModelConfig& c = mb.config;
      // LaX: its crossings (every block but the first) on top: naive-tp does 1/t of each on a
      // rank (its r/t columns), btp all of it on every rank (replicated, with no collective).
      const Work xf = lax_crossing_work(mb, false), xb = lax_crossing_work(mb, true);
      EXPECT_DOUBLE_EQ(xb.gemm_flops(), 2 * xf.gemm_flops());
      const double crossings =
          (c.n_layers - 1) * xf.gemm_flops() * (lc.layout == LayoutKind::naive_tp ? t : 1);
      if (lc.layout == LayoutKind::btp) {
        EXPECT_EQ(xf.tp.total_calls() + xb.tp.total_calls(), 0);
      }
      const double per_block = (model_flops(c, B, T).projections - crossings) / c.n_layers;
      if (c.arch == Arch::lax) {
        EXPECT_GT(crossings, 0);
      }
      const Work f = block_forward_work(mb), b = block_backward_work(mb);
      SCOPED_TRACE(test::case_name(lc) + " tp=" + std::to_string(t));
      EXPECT_DOUBLE_EQ(f.gemm_flops() * t, per_block);
      EXPECT_DOUBLE_EQ(b.gemm_flops(), 2 * f.gemm_flops());
      const double heads_share = lc.layout == LayoutKind::naive_tp ? 1.0 : 1.0 / t;
      EXPECT_DOUBLE_EQ(f.attention_flops, attention_forward_flops(c, B, T) * heads_share);
      EXPECT_DOUBLE_EQ(b.attention_flops, 2.5 * f.attention_flops);
    }
  }
}

// Lowrank recomputation reruns only the B halves of q, k, v, gate, up: r·d_out/t each per token.
TEST(PlanWorkload, LowrankRecomputationIsTheBHalvesOfFiveProjections) {
  const LayoutCase lc{LayoutKind::btp, Arch::cola, {true, true, Recompute::lowrank}};
  const int64_t B = 2, T = 8, N = B * T;
  for (int t : {1, 2, 4}) {
    const MicroBatchShape mb = test::micro_batch(lc, B, T, t);
    double expected = 0;
    for (const auto& p : block_projections(mb.config))
      if (p.kind != ProjKind::o && p.kind != ProjKind::down)
        expected += 2.0 * N * p.rank * p.d_out / t;
    const Work re = block_recompute_work(mb);
    EXPECT_DOUBLE_EQ(re.gemm_flops(), expected) << "tp=" << t;
    EXPECT_EQ(re.tp.total_calls(), 0) << "lowrank recomputation needs no collective";
  }
}

// The head's three GEMMs per chunk are model_flops' head × 3, split over the vocabulary.
TEST(PlanWorkload, HeadFlopsMatchModelFlops) {
  const LayoutCase lc{LayoutKind::btp, Arch::cola, {}};
  for (int t : {1, 2, 4}) {
    const MicroBatchShape mb = test::micro_batch(lc, 2, 8, t);
    EXPECT_DOUBLE_EQ(head_work(mb).gemm_flops() * t, 3 * model_flops(mb.config, 2, 8).head);
  }
}

// The embedding's and head's collectives are outer_tp_comm's, and a whole step's are
// step_tp_comm's (recomputation included) — the model sends what the engine's formulas say.
TEST(PlanWorkload, CommunicationIsTheEnginesFormulas) {
  const int64_t B = 2, T = 8, N = B * T;
  for (const LayoutCase& lc : layout_cases()) {
    for (int t : {1, 2, 4}) {
      const MicroBatchShape mb = test::micro_batch(lc, B, T, t);
      if (mb.config.n_kv_heads % t != 0) continue;
      SCOPED_TRACE(test::case_name(lc) + " tp=" + std::to_string(t));
      const int64_t chunks = (N + head_chunk_rows(mb) - 1) / head_chunk_rows(mb);
      const CommCounts step = step_tp_comm(lc.layout, mb.config, N, t, chunks, true, lc.options);
      const CommCounts modelled = whole_model_work(mb).tp;
      for (int k = 0; k < kCollectiveKinds; ++k) {
        EXPECT_EQ(modelled.by_kind[k].calls, step.by_kind[k].calls) << k;
        EXPECT_EQ(modelled.by_kind[k].bytes, step.by_kind[k].bytes) << k;
      }
    }
  }
}

// In one process the engine's recorded GEMMs of a training step are exactly the model's list,
// and its GEMM calls the model's (a batched call's later members have no call of their own).
TEST(PlanWorkload, GemmShapesAreTheOnesTheEngineRuns) {
  const int64_t B = 2, T = 8;
  for (const LayoutCase& lc : layout_cases()) {
    const MicroBatchShape mb = test::micro_batch(lc, B, T, 1);
    Model model(mb.config, DType::f32, lc.layout, nullptr, lc.options);
    model.init_weights(3);
    const auto tokens = random_tokens(B * T, mb.config.vocab_size, 1);
    gemm_clear_recorded_shapes();
    gemm_record_shapes(true);
    const int64_t calls_before = gemm_counters().calls;
    model.forward_backward(tokens.data(), tokens.data(), B, T);
    const int64_t calls = gemm_counters().calls - calls_before;
    gemm_record_shapes(false);
    const Work work = whole_model_work(mb);
    EXPECT_EQ(test::sorted_shapes(work.gemms), test::sorted_shapes(gemm_recorded_shapes()))
        << test::case_name(lc);
    EXPECT_EQ(std::count_if(work.gemms.begin(), work.gemms.end(),
                            [](const GemmWork& g) { return g.own_call; }),
              calls)
        << test::case_name(lc);
  }
}

// The head runs in row chunks of at most 16 Mi logits; the model follows the engine's chunking.
TEST(PlanWorkload, HeadChunksAreTheEngines) {
  LayoutCase lc{LayoutKind::btp, Arch::cola, {}};
  MicroBatchShape mb = test::micro_batch(lc, 8, 128, 1);
  mb.config.vocab_size = 32768;
  mb.config.n_layers = 1;
  mb.config.max_seq_len = 128;
  EXPECT_EQ(head_chunk_rows(mb), 512);  // 16 Mi / 32768 rows: two chunks of 1024 tokens
  Model model(mb.config, DType::f32, lc.layout, nullptr, lc.options);
  const auto tokens = random_tokens(mb.tokens(), mb.config.vocab_size, 1);
  gemm_clear_recorded_shapes();
  gemm_record_shapes(true);
  model.forward_backward(tokens.data(), tokens.data(), mb.batch, mb.seq_len);
  gemm_record_shapes(false);
  EXPECT_EQ(test::sorted_shapes(whole_model_work(mb).gemms),
            test::sorted_shapes(gemm_recorded_shapes()));
}

// Parameters, activations and what a block keeps, against the engine's own counts.
TEST(PlanMemory, MatchesTheEnginesAccountingInOneProcess) {
  const int64_t B = 2, T = 8;
  for (const LayoutCase& lc : layout_cases()) {
    const MicroBatchShape mb = test::micro_batch(lc, B, T, 1);
    Model model(mb.config, DType::f32, lc.layout, nullptr, lc.options);
    const auto tokens = random_tokens(B * T, mb.config.vocab_size, 1);
    model.forward(tokens.data(), tokens.data(), B, T);
    SCOPED_TRACE(test::case_name(lc));
    EXPECT_EQ(stage_param_elements(lc.layout, mb.config, 1, 1, 0),
              model.params().parameter_count());
    EXPECT_EQ(4 * model_activation_elements(mb), model.activation_bytes());
    EXPECT_EQ(4 * block_kept_elements(mb), model.kept_bytes_per_block());
    // bf16 keeps gate | up in bf16.
    model.set_compute(DType::bf16);
    model.forward(tokens.data(), tokens.data(), B, T);
    EXPECT_EQ(model_activation_bytes(mb, DType::bf16), model.activation_bytes());
  }
}

// SPEC §3.6: lowrank checkpointing keeps N·(2d/t + 7r + 2) per block and rank, where 7r is the
// sum of the seven families' ranks (4·attn_rank + 3·mlp_rank when the kinds share one).
TEST(PlanMemory, LowrankKeepsTheSpecsLatents) {
  for (RankMix mix : {RankMix::uniform, RankMix::odd}) {
    const LayoutCase lc{LayoutKind::btp, Arch::cola, {true, true, Recompute::lowrank}, 4, mix};
    for (int t : {1, 2, 4}) {
      const MicroBatchShape mb = test::micro_batch(lc, 2, 8, t);
      const ModelConfig& c = mb.config;
      const int64_t latents =
          mix == RankMix::uniform ? 4 * c.attn_rank + 3 * c.mlp_rank : 5 + 3 + 7 + 9 + 11 + 13 + 15;
      EXPECT_EQ(block_kept_elements(mb), mb.tokens() * (2 * c.d_model / t + latents + 2));
    }
  }
}

// Stages split the blocks evenly (the first n_layers % pp one more) and the parameters with
// them: the stages together hold the whole model once (untied).
TEST(PlanMemory, StagesPartitionTheModel) {
  const ModelConfig c = small_model(Arch::cola, 4, 7);
  for (int pp : {1, 2, 3, 7}) {
    int64_t layers = 0, params = 0;
    for (int s = 0; s < pp; ++s) {
      layers += stage_layers(c, pp, s);
      params += stage_param_elements(LayoutKind::btp, c, 1, pp, s);
    }
    EXPECT_EQ(layers, c.n_layers);
    EXPECT_EQ(params, stage_param_elements(LayoutKind::btp, c, 1, 1, 0));
  }
}

}  // namespace
}  // namespace boostlm::plan
