// The cost of each piece in closed form: the GEMM curve, α–β collectives with the ring factors,
// the 1F1B bubble, DP overlap, memory per rank, and how a grid is placed on nodes.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "plan/cost.h"
#include "plan/memory.h"
#include "plan/step_model.h"
#include "plan_test_util.h"

namespace boostlm::plan {
namespace {

// A device where every number is round, so the closed forms below are easy to state.
Hardware round_hardware() {
  Hardware h;
  h.name = "round";
  h.devices_per_node = 4;
  h.device.memory_bytes = 1e12;
  h.device.gemm[DType::bf16] = {100e12, 0.5, 64};
  h.device.gemm[DType::f32] = {10e12, 1.0, 0};
  h.device.memory_bandwidth = 1e12;
  h.device.elementwise_efficiency = 0.5;
  h.device.attention_max_efficiency = 0.5;
  h.intra_node = {10e-6, 100e9, 0.5, false, {}, 0};
  h.inter_node = {20e-6, 10e9, 1.0, true, {}, 0};
  return h;
}

TEST(PlanCost, GemmCurveIsTheStatedProduct) {
  const GemmCurve c{100e12, 0.8, 64};
  EXPECT_DOUBLE_EQ(gemm_efficiency(c, 64, 64, 64), 0.8 / 8);  // each dimension at half speed
  EXPECT_NEAR(gemm_efficiency(c, 1 << 30, 1 << 30, 1 << 30), 0.8, 1e-6);
  // Thin GEMMs run less efficiently than square ones of the same FLOPs (SPEC §1).
  EXPECT_LT(gemm_efficiency(c, 16384, 4096, 256), gemm_efficiency(c, 16384, 1024, 1024));
  const Hardware h = round_hardware();
  const GemmWork g{4096, 4096, 4096};
  const double expected =
      g.flops() / (100e12 * gemm_efficiency(h.device.gemm.at(DType::bf16), 4096, 4096, 4096));
  EXPECT_DOUBLE_EQ(gemm_seconds(h.device, DType::bf16, g), expected);
  // A GEMM whose operands take longer to move than to multiply is memory-bound.
  const GemmWork thin{1 << 20, 1, 1};
  EXPECT_DOUBLE_EQ(gemm_seconds(h.device, DType::f32, thin),
                   ((1 << 20) * 4.0 + 4.0 + (1 << 20) * 4.0) / 1e12);
}

TEST(PlanCost, CollectivesAreAlphaBetaWithTheRingFactors) {
  EXPECT_DOUBLE_EQ(ring_factor(Collective::all_reduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(ring_factor(Collective::all_reduce, 4), 1.5);  // 2(t−1)/t
  EXPECT_DOUBLE_EQ(ring_factor(Collective::reduce_scatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(ring_factor(Collective::all_gather, 4), 3.0);  // counted per rank
  const Link link{10e-6, 100e9, 0.5, false, {}, 0};
  EXPECT_DOUBLE_EQ(collective_seconds(link, Collective::all_reduce, 3, 1e9, 8, 8),
                   3 * 10e-6 + 2.0 * 7 / 8 * 1e9 / 50e9);
  EXPECT_DOUBLE_EQ(collective_seconds(link, Collective::all_reduce, 3, 1e9, 1), 0.0);
  const Link shared{0, 10e9, 1.0, true, {}, 0};  // one NIC for the node: four flows share it
  EXPECT_DOUBLE_EQ(collective_seconds(shared, Collective::send, 1, 1e9, 2, 4), 0.4);
  // The engine counts 4 bytes per element; comm_seconds re-prices them at the element width.
  CommCounts counts;
  counts[Collective::all_reduce] = {2, 4000};
  counts[Collective::recv] = {5, 1 << 20};  // the other end of a send: not timed twice
  EXPECT_DOUBLE_EQ(comm_seconds(link, counts, 2, 2.0),
                   collective_seconds(link, Collective::all_reduce, 2, 2000, 2));
}

// A measured link prices each call from its points: exact at a point, log-log between two, in
// proportion to the bytes past the last, the first point's time below it; α–β is not used.
TEST(PlanCost, MeasuredLinksPriceCallsFromTheirPoints) {
  Link link{1.0, 1.0, 1.0, false, {}, 0};  // α–β that would give absurd times
  link.measured = {{1e3, 20e-6}, {1e6, 1e-3}, {1e7, 20e-3}};
  EXPECT_DOUBLE_EQ(link.call_seconds(1e6), 1e-3);
  EXPECT_DOUBLE_EQ(link.call_seconds(100), 20e-6);
  EXPECT_DOUBLE_EQ(link.call_seconds(4e7), 80e-3);
  EXPECT_NEAR(link.call_seconds(std::sqrt(1e6 * 1e7)), std::sqrt(1e-3 * 20e-3), 1e-12);
  // Three all-reduces of 2 MB over 4 ranks: 3 MB on the wire each (2(t−1)/t).
  EXPECT_NEAR(collective_seconds(link, Collective::all_reduce, 3, 6e6, 4),
              3 * link.call_seconds(3e6), 1e-15);
  // Four flows on a shared link: each call as long as one of 4× the bytes.
  link.shared_by_node = true;
  EXPECT_NEAR(collective_seconds(link, Collective::send, 1, 1e6, 2, 4), link.call_seconds(4e6),
              1e-15);
  // The hardware file keeps the points (microseconds), and rejects unordered ones.
  Hardware h = round_hardware();
  h.inter_node = link;
  const Hardware back = Hardware::from_json(h.to_json());
  ASSERT_EQ(back.inter_node.measured.size(), 3u);
  EXPECT_NEAR(back.inter_node.measured[2].second, 20e-3, 1e-12);
  nlohmann::json bad = h.to_json();
  bad["links"]["inter_node"]["measured"] = {{1e6, 10.0}, {1e3, 5.0}};
  EXPECT_THROW(Hardware::from_json(bad), Error);
  bad["links"]["inter_node"]["measured"] = {{1e6}};  // not a [bytes, us] pair
  EXPECT_THROW(Hardware::from_json(bad), Error);
  bad["links"]["inter_node"]["measured"] = {{1e6, -1.0}};
  EXPECT_THROW(Hardware::from_json(bad), Error);
  bad = h.to_json();
  bad["links"]["inter_node"]["overlap_cost_ns_per_byte"] = -1.0;
  EXPECT_THROW(Hardware::from_json(bad), Error);
}

TEST(PlanCost, ElementwiseAndAttentionUseBandwidthAndTheHeadDimCurve) {
  const Hardware h = round_hardware();
  EXPECT_DOUBLE_EQ(elementwise_seconds(h.device, 1e9, 0, 2.0), 2e9 / 0.5e12);
  Work w;
  w.attention_flops = 1e12;
  w.attention_calls = 1;
  Device d = h.device;
  d.attention_half_head_dim = 64;
  // hd = 64 runs at half of max_efficiency (0.5): 25% of the bf16 peak.
  EXPECT_DOUBLE_EQ(attention_seconds(d, DType::bf16, w, 64, 2.0), 1e12 / (100e12 * 0.25));
}

StepConfig btp_step(int tp, int pp, int dp, int64_t m) {
  StepConfig c;
  c.layout = LayoutKind::btp;
  c.config = small_model(Arch::cola, 4, 8);
  c.tp = tp;
  c.pp = pp;
  c.dp = dp;
  c.micro_batch = 2;
  c.micro_batches = m;
  c.seq_len = 8;
  return c;
}

// 1F1B: (m + p − 1) micro-batch times of the slowest stage; the bubble is (p−1)/(m+p−1) of them.
TEST(PlanStepModel, PipelineBubbleIsOneFOneB) {
  const Hardware h = round_hardware();
  for (int64_t m : {1, 4, 16}) {
    const StepPrediction p = predict_step(h, btp_step(1, 4, 1, m));
    const double pipeline = p.step_s - p.dp_exposed_s - p.optimizer_s;
    EXPECT_NEAR(p.bubble_s / pipeline, 3.0 / (m + 3), 1e-12) << "m=" << m;
    EXPECT_NEAR(p.micro_batches.total() + p.pp_comm_s + p.bubble_s, pipeline, 1e-12 * pipeline);
  }
  EXPECT_EQ(predict_step(h, btp_step(1, 1, 1, 4)).bubble_s, 0.0);
}

// CUDA graphs (issue 47): where the engine replays a GPU step (no TP-overlap chunks; TP's and DP's
// collectives are in the graphs; pipeline stages replay each micro-batch's forward and backward,
// but not with whole-block recomputation or LaX) a launch costs the device's per-node overhead
// instead of the host's; the norm and the updates are graphs in every layout.
TEST(PlanStepModel, ReplayedStepsPayTheGraphNodeOverhead) {
  Hardware h = round_hardware();
  h.device.kernel_overhead_s = 3e-6;
  h.device.gemm_overhead_s = 5e-6;
  EXPECT_DOUBLE_EQ(launch_seconds(h.device, 3e-6, true), 3e-6) << "no node overhead: unknown";
  h.device.graph_node_overhead_s = 1e-6;
  EXPECT_DOUBLE_EQ(launch_seconds(h.device, 3e-6, true), 1e-6);
  EXPECT_DOUBLE_EQ(launch_seconds(h.device, 3e-6, false), 3e-6);
  EXPECT_DOUBLE_EQ(launch_seconds(h.device, 0.5e-6, true), 0.5e-6) << "never dearer than a launch";
  auto without = [](StepConfig c) {
    c.cuda_graphs = false;
    return c;
  };
  StepConfig zero = btp_step(1, 1, 2, 1);
  zero.zero1 = true;
  for (const StepConfig& c : {btp_step(1, 1, 1, 1), btp_step(2, 1, 1, 2), btp_step(1, 1, 2, 1),
                              zero, btp_step(1, 2, 1, 2), btp_step(2, 2, 2, 4)}) {
    const StepPrediction on = predict_step(h, c), off = predict_step(h, without(c));
    EXPECT_LT(on.micro_batches.compute(), off.micro_batches.compute()) << c.tp << " " << c.dp;
    EXPECT_DOUBLE_EQ(on.micro_batches.comm, off.micro_batches.comm);
    EXPECT_LT(on.optimizer_s, off.optimizer_s);
  }
  // Pipeline stages under whole-block recomputation, and of LaX, are in the step's graph too
  // (Model::pipeline_graphs_possible; they were launched from the host before 2026-12-06).
  StepConfig block = btp_step(1, 2, 1, 2), lax = btp_step(2, 2, 2, 4);
  block.options.recompute = Recompute::block;
  lax.config.arch = Arch::lax;
  for (const StepConfig& c : {block, lax}) {
    const StepPrediction on = predict_step(h, c), off = predict_step(h, without(c));
    EXPECT_LT(on.micro_batches.compute(), off.micro_batches.compute()) << c.pp << c.dp;
    EXPECT_LT(on.optimizer_s, off.optimizer_s);
  }
  // --tp-overlap's chunks keep a step launched from the host.
  StepConfig chunked = btp_step(2, 1, 1, 4);
  chunked.options.overlap_chunks = 2;
  const StepPrediction on = predict_step(h, chunked), off = predict_step(h, without(chunked));
  EXPECT_DOUBLE_EQ(on.micro_batches.compute(), off.micro_batches.compute());
}

// DP reduction hides behind the last micro-batch's backward; ZeRO-1's does not.
TEST(PlanStepModel, DataParallelReductionOverlapsBackward) {
  Hardware h = round_hardware();
  const StepPrediction fast = predict_step(h, btp_step(1, 1, 4, 1));
  EXPECT_GT(fast.dp_comm_s, 0.0);
  EXPECT_LE(fast.dp_exposed_s, fast.dp_comm_s);
  h.intra_node.bandwidth = 1e3;  // a link so slow that nothing can hide it
  const StepPrediction slow = predict_step(h, btp_step(1, 1, 4, 1));
  EXPECT_GT(slow.dp_exposed_s, 0.5 * slow.dp_comm_s);
  StepConfig zero = btp_step(1, 1, 4, 1);
  zero.zero1 = true;
  const StepPrediction z = predict_step(h, zero);
  EXPECT_DOUBLE_EQ(z.dp_exposed_s, z.dp_comm_s);
}

// Memory per rank: fp32 weights and gradients (4 + 4 bytes), two fp32 moments (8, /dp with
// ZeRO-1), a bf16 copy (2); activations: kept per block × blocks × micro-batches in flight.
TEST(PlanStepModel, MemoryPerRankIsTheClosedForm) {
  const Hardware h = round_hardware();
  StepConfig c = btp_step(2, 2, 2, 8);
  c.zero1 = true;
  const StepPrediction p = predict_step(h, c);
  const MicroBatchShape mb{c.layout, c.config, c.options, c.micro_batch, c.seq_len, c.tp};
  // Stage 0 holds the embedding and two micro-batches in flight; it is the larger.
  const double params = stage_param_elements(c.layout, c.config, 2, 2, 0);
  EXPECT_DOUBLE_EQ(p.memory.weights, 4 * params);
  EXPECT_DOUBLE_EQ(p.memory.optimizer, 8 * params / 2);
  // The bf16 copy has no untied embedding (its lookup reads fp32).
  const double embedding =
      c.config.tied_embeddings ? 0 : c.config.vocab_size / 2 * c.config.d_model;
  EXPECT_DOUBLE_EQ(p.memory.weights_bf16, 2 * (params - embedding));
  // What this engine allocates on every backend (issue 46: `train`'s memory check counts the same):
  // activations in fp32, but for the parts it keeps in bf16 when it computes in bf16: the
  // intermediates and latents, and the residual stream (each block's input and x_mid, issue 60).
  const int64_t blocks = stage_layers(c.config, 2, 0) * 2;
  const int64_t kept = block_kept_elements(mb) * blocks;
  EXPECT_DOUBLE_EQ(p.memory.activations, 4.0 * (kept + recompute_area_elements(mb)) -
                                             2.0 * bf16_kept_elements(mb, blocks) -
                                             2.0 * residual_kept_elements(mb, blocks, blocks));
  // The checkpoint's staging buffer, host memory: at most the rank's weights and moments.
  EXPECT_DOUBLE_EQ(p.memory.checkpoint_staging, p.memory.weights + p.memory.optimizer);
}

// TP innermost, PP outermost (comm/grid.h): with 4 devices per node, TP 4 stays inside a node
// and TP 8 does not; DP over TP 2 × DP 2 stays inside, PP across 2 nodes crosses.
TEST(PlanStepModel, GroupsArePlacedOnNodesAsTheGridOrdersRanks) {
  const Hardware h = round_hardware();
  EXPECT_EQ(predict_step(h, btp_step(4, 1, 1, 1)).tp_link, "intra-node");
  StepConfig wide = btp_step(4, 1, 2, 1);
  EXPECT_EQ(predict_step(h, wide).dp_link, "inter-node");
  EXPECT_EQ(predict_step(h, btp_step(2, 2, 2, 2)).dp_link, "intra-node");
  EXPECT_EQ(predict_step(h, btp_step(2, 2, 2, 2)).pp_link, "inter-node");
}

// --tp-overlap: the blocks' compute is that of two half-batch chunks, and their TP communication
// (twice the calls, the same bytes) is hidden behind it up to the fill: the step is never shorter
// than the compute or the communication alone, and on a slow link overlap pays.
TEST(PlanStepModel, OverlapHidesCommunicationBehindTheOtherChunk) {
  Hardware h = round_hardware();
  h.device.gemm[DType::bf16].peak_flops = 1e9;  // a slow device, so compute can match the link
  h.device.memory_bandwidth = 1e10;
  for (double bandwidth : {1e6, 1e7, 1e8, 1e9, 1e10, 100e9}) {
    h.intra_node.bandwidth = bandwidth;
    StepConfig plain = btp_step(2, 1, 1, 1), overlap = plain;
    plain.seq_len = overlap.seq_len = 512;  // chunks of 512 tokens: GEMMs as efficient as whole
    overlap.options.overlap_chunks = 2;
    const StepPrediction off = predict_step(h, plain), on = predict_step(h, overlap);
    // On a slow link overlap pays; where latency dominates, twice the calls can cost more.
    if (bandwidth == 1e6) {  // communication about half the compute: mostly hidden
      EXPECT_LT(on.micro_batches.comm, 0.2 * off.micro_batches.comm);
      EXPECT_LT(on.step_s, 0.8 * off.step_s);
    }
    // Exposed TP time is at least what the compute of the blocks cannot cover.
    EXPECT_GE(on.step_s, std::max(on.compute_s(), off.micro_batches.comm * 0.99)) << bandwidth;
  }
  h.intra_node.bandwidth = 1e3;  // communication dominates: the step is about all of it
  StepConfig plain = btp_step(2, 1, 1, 1), overlap = plain;
  overlap.options.overlap_chunks = 2;
  const StepPrediction off = predict_step(h, plain), on = predict_step(h, overlap);
  EXPECT_GT(on.step_s, 0.95 * off.step_s);
  // An odd micro-batch of 1 sequence cannot be split: the prediction is the plain one.
  plain.micro_batch = overlap.micro_batch = 1;
  EXPECT_DOUBLE_EQ(predict_step(h, overlap).step_s, predict_step(h, plain).step_s);
}

// A link whose transfers cost the compute beside them (TCP on the compute cores) makes hiding cost
// that much: with communication shorter than compute (all of it covered), the overlapped step
// grows by the cost per byte times the blocks' bytes on the wire, and never when nothing is
// overlapped.
TEST(PlanStepModel, OverlapPaysWhatInFlightTransfersCostTheCompute) {
  Hardware h = round_hardware();
  h.device.gemm[DType::bf16].peak_flops = 1e9;
  h.device.memory_bandwidth = 1e10;
  h.intra_node.bandwidth = 1e8;  // communication well below the compute: all of it covered
  StepConfig plain = btp_step(2, 1, 1, 1), overlap = plain;
  overlap.options.overlap_chunks = 2;
  const StepPrediction free_on = predict_step(h, overlap), free_off = predict_step(h, plain);
  h.intra_node.overlap_cost_s_per_byte = 1e-9;
  const StepPrediction on = predict_step(h, overlap), off = predict_step(h, plain);
  EXPECT_DOUBLE_EQ(off.step_s, free_off.step_s);
  // The blocks' TP bytes on the wire per step (forward and backward, every layer, both chunks).
  MicroBatchShape chunk{plain.layout,          plain.config,  plain.options,
                        plain.micro_batch / 2, plain.seq_len, 2};
  const double element = 2;  // round_hardware keeps activations in bf16
  const double bytes = 2.0 * plain.config.n_layers *
                       (wire_bytes(block_forward_work(chunk).tp, 2, element) +
                        wire_bytes(block_backward_work(chunk).tp, 2, element));
  EXPECT_NEAR(on.step_s - free_on.step_s, 1e-9 * bytes, 1e-6 * free_on.step_s);
}

TEST(PlanStepModel, RefusesWhatTheEngineCannotRun) {
  const Hardware h = round_hardware();
  StepConfig c = btp_step(3, 1, 1, 1);  // 4 heads over 3 ranks
  EXPECT_THROW(predict_step(h, c), Error);
  c = btp_step(1, 9, 1, 1);  // more stages than blocks
  EXPECT_THROW(predict_step(h, c), Error);
  c = btp_step(1, 1, 1, 1);
  c.layout = LayoutKind::naive_tp;
  c.options.recompute = Recompute::lowrank;  // lowrank checkpointing is btp's
  EXPECT_THROW(predict_step(h, c), Error);
}

}  // namespace
}  // namespace boostlm::plan
