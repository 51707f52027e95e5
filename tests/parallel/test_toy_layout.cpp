// The seam a fourth layout plugs into: a toy layout registered here, in the test tree, with its own
// made-up cost model, gets its names, its communication formulas and the planner's work and memory
// figures from that description alone — no switch elsewhere knows it.
//
// The toy, "replicated": every rank holds the whole dense block and does all of its work, so its
// blocks need no collective but one it makes up: each block's forward checks that the replicas
// agree, an all_reduce_max of one value per token. It keeps norm1, attn, norm2, gate and up per
// block. It has no blocks to run
// (make is nullptr), so it describes costs only.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "model/flops.h"
#include "parallel/comm_formulas.h"
#include "parallel/layout_cost.h"
#include "plan/memory.h"
#include "plan/step_model.h"
#include "plan/workload.h"
#include "test_util.h"

namespace boostlm {
namespace {

class ReplicatedCost final : public LayoutCost {
 public:
  CommCounts block_comm(const BlockSetting& s, bool backward) const override {
    CommCounts out;
    if (!backward) add_collective(out, Collective::all_reduce_max, 1, s.tokens);
    return out;
  }

  void block_work(const BlockSetting& s, bool backward, WorkSink& sink) const override {
    const ModelConfig& c = s.config;
    const int64_t N = s.tokens;
    for (const ProjDims& p : block_projections(c)) {
      if (backward) {
        sink.gemm(p.d_out, p.d_in, N);
        sink.gemm(N, p.d_in, p.d_out);
      } else {
        sink.gemm(N, p.d_out, p.d_in);
      }
    }
    sink.attention(c.n_heads, c.n_kv_heads, backward);
    norms_rope_swiglu_work(sink, N, c.d_model, c.d_model, c.kv_dim(), c.d_ff, c.d_model, backward);
  }

  int64_t slot_elements(const BlockSetting& s) const override {
    return s.tokens * (3 * s.config.d_model + 2 * s.config.d_ff);
  }

  int64_t block_param_elements(const ModelConfig& c, int) const override {
    return sharded_block_params(c, 1, false);
  }

  int64_t bf16_kept_columns(const ModelConfig& c, int) const override { return 2 * c.d_ff; }
};

// The toy in the registry for as long as this lives, so that the other tests of this binary see
// the three built-in layouts only.
struct RegisteredToy {
  RegisteredToy() {
    static const ReplicatedCost cost;
    kind = register_layout({LayoutKind{}, "replicated", "every rank runs the whole block",
                            /*low_rank=*/false, /*hidden_sharded_residual=*/false,
                            /*keeps_latents=*/false, /*shards_ranks=*/false, nullptr, &cost});
  }
  ~RegisteredToy() { unregister_layout(kind); }
  RegisteredToy(const RegisteredToy&) = delete;
  RegisteredToy& operator=(const RegisteredToy&) = delete;
  LayoutKind kind{};
};

class ToyLayout : public ::testing::Test {
 protected:
  plan::MicroBatchShape micro_batch(int tp, Recompute recompute = Recompute::none) const {
    return {kind, config, {true, true, recompute}, B, T, tp};
  }

  RegisteredToy toy;
  const LayoutKind kind = toy.kind;
  const ModelConfig config = small_model(Arch::dense);
  const int64_t B = 2, T = 8, N = B * T;
};

TEST_F(ToyLayout, IsNamedParsedAndListedLikeTheBuiltInOnes) {
  EXPECT_EQ(parse_layout("replicated"), kind);
  EXPECT_EQ(to_string(kind), "replicated");
  const std::vector<std::string> names = layout_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "replicated"), names.end());
  const std::vector<LayoutKind> dense = layouts_for(false);
  EXPECT_NE(std::find(dense.begin(), dense.end(), kind), dense.end());
  EXPECT_THROW(register_layout(layout_traits(kind)), Error);  // the name is taken
  Communicator self;
  try {
    make_layout(kind, config, self);
    ADD_FAILURE() << "a layout without a factory was built";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("replicated"), std::string::npos) << e.what();
  }
}

// Its blocks send its check alone at any TP size, so a whole step sends what the embedding, head
// and loss send plus one check per block — not dense-tp's block traffic.
TEST_F(ToyLayout, FormulasFollowItsDescription) {
  const int64_t chunks = 1;
  for (int tp : {2, 4}) {
    SCOPED_TRACE("tp=" + std::to_string(tp));
    const CommCounts forward = block_tp_comm(kind, config, N, tp, false);
    EXPECT_EQ(forward[Collective::all_reduce_max].calls, 1);
    EXPECT_EQ(forward[Collective::all_reduce_max].bytes, N * 4);
    EXPECT_EQ(forward.total_calls(), 1);
    EXPECT_EQ(block_tp_comm(kind, config, N, tp, true).total_calls(), 0);
    const CommCounts step = step_tp_comm(kind, config, N, tp, chunks, true);
    const CommCounts blocks = step - outer_tp_comm(kind, config, N, tp, chunks, true);
    EXPECT_EQ(blocks[Collective::all_reduce_max].calls, config.n_layers);
    EXPECT_EQ(blocks.total_bytes(), config.n_layers * N * 4);
  }
  EXPECT_EQ(block_tp_comm(kind, config, N, 1, false).total_calls(), 0);  // t = 1 sends nothing
}

// Every rank does the whole block: model_flops' share of one block at every TP size, all heads,
// the six element-wise kernels forward (two norms, RoPE, SwiGLU, two residual adds) and four
// backward, and its collectives are its formulas'.
TEST_F(ToyLayout, PlannerWorkIsItsDescription) {
  const ModelFlops flops = model_flops(config, B, T);
  for (int tp : {1, 2, 4}) {
    const plan::Work f = plan::block_forward_work(micro_batch(tp));
    const plan::Work b = plan::block_backward_work(micro_batch(tp));
    SCOPED_TRACE("tp=" + std::to_string(tp));
    EXPECT_DOUBLE_EQ(f.gemm_flops(), flops.projections / config.n_layers);
    EXPECT_DOUBLE_EQ(b.gemm_flops(), 2 * f.gemm_flops());
    EXPECT_EQ(f.gemms.size(), 7u);
    EXPECT_EQ(b.gemms.size(), 14u);
    EXPECT_DOUBLE_EQ(f.attention_flops, flops.attention / config.n_layers);
    EXPECT_EQ(f.elementwise_kernels, 6);
    EXPECT_EQ(b.elementwise_kernels, 4);
    EXPECT_EQ(f.tp.total_calls(), tp > 1 ? 1 : 0);
    EXPECT_EQ(b.tp.total_calls(), 0);
    // Whole-block recomputation reruns its forward in backward, its check included.
    const plan::Work re = plan::block_recompute_work(micro_batch(tp, Recompute::block));
    EXPECT_DOUBLE_EQ(re.gemm_flops(), f.gemm_flops());
    EXPECT_EQ(re.tp.total_bytes(), f.tp.total_bytes());
    const plan::MicroBatchShape mb = micro_batch(tp);
    const int64_t chunks = (N + plan::head_chunk_rows(mb) - 1) / plan::head_chunk_rows(mb);
    EXPECT_EQ(plan::whole_model_work(mb).tp.total_bytes(),
              step_tp_comm(kind, config, N, tp, chunks, true).total_bytes());
  }
}

// Full weights on every rank; it keeps its input (full width: the residual is not sharded) and
// its slot; whole-block recomputation keeps the input only and rebuilds one slot.
TEST_F(ToyLayout, MemoryFollowsItsDescription) {
  int64_t full = 2 * config.d_model;
  for (const ProjDims& p : block_projections(config)) full += p.d_in * p.d_out;
  const int64_t slot = N * (3 * config.d_model + 2 * config.d_ff), input = N * config.d_model;
  for (int tp : {1, 2, 4}) {
    SCOPED_TRACE("tp=" + std::to_string(tp));
    EXPECT_EQ(plan::block_param_elements(kind, config, tp), full);
    EXPECT_EQ(plan::block_slot_elements(micro_batch(tp)), slot);
    EXPECT_EQ(plan::block_kept_elements(micro_batch(tp)), input + slot);
    EXPECT_EQ(plan::recompute_area_elements(micro_batch(tp)), 0);
    EXPECT_EQ(plan::block_kept_elements(micro_batch(tp, Recompute::block)), input);
    EXPECT_EQ(plan::recompute_area_elements(micro_batch(tp, Recompute::block)), slot);
    plan::StepConfig step;
    step.layout = kind;
    step.config = config;
    step.tp = tp;
    step.seq_len = T;
    step.micro_batch = B;
    step.precision = DType::f32;
    plan::MemoryEstimate m = plan::rank_memory(step, 0, 4);
    EXPECT_DOUBLE_EQ(m.weights, 4.0 * plan::stage_param_elements(kind, config, tp, 1, 0));
    EXPECT_DOUBLE_EQ(m.activations, 4.0 * config.n_layers * (input + slot));
    // bf16 on the CPU backend: fp32 activations but for the columns the layout says it keeps in
    // bf16, and the residual stream (each block's input and its x_mid: issue 60).
    step.precision = DType::bf16;
    m = plan::rank_memory(step, 0, 4);
    EXPECT_DOUBLE_EQ(m.activations, 4.0 * config.n_layers * (input + slot) -
                                        2.0 * config.n_layers * 2 * N * config.d_ff -
                                        2.0 * config.n_layers * 2 * N * config.d_model);
    // --residual-dtype fp32 keeps the residual in fp32.
    step.options.residual = DType::f32;
    m = plan::rank_memory(step, 0, 4);
    EXPECT_DOUBLE_EQ(m.activations, 4.0 * config.n_layers * (input + slot) -
                                        2.0 * config.n_layers * 2 * N * config.d_ff);
  }
}

// A registration ends with its scope: parse_layout and the registry are the built-in ones again.
TEST(ToyLayoutScope, RegistryIsBackToTheBuiltInLayoutsAfterIt) {
  const size_t built_in = layout_registry().size();
  {
    RegisteredToy toy;
    EXPECT_EQ(layout_registry().size(), built_in + 1);
    EXPECT_EQ(parse_layout("replicated"), toy.kind);
  }
  EXPECT_EQ(layout_registry().size(), built_in);
  EXPECT_THROW(parse_layout("replicated"), Error);
  RegisteredToy again;  // and the name is free to register once more
  EXPECT_EQ(parse_layout("replicated"), again.kind);
}

}  // namespace
}  // namespace boostlm
