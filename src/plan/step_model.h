// The analytic model of one training step: TP × PP × DP, any layout and switches, micro-batch size
// and count, sequence length, precision and recomputation, on a cluster described by a Hardware.
//
//   per micro-batch on stage s:  S_s = Σ blocks (forward + backward + recomputation, TP
//                                collectives included, all blocking as in the engine)
//                                + embedding (first stage) + head and loss (last stage)
//                                + 2 point-to-point transfers of [b·T, residual columns] (PP > 1)
//   with --tp-overlap (c chunks): the blocks run per chunk of b/c sequences, and each pass through
//                                them costs c·L·max(compute, TP comm) of one chunk's block plus
//                                its fill (step_model.cpp's overlapped_pass); the LM head's ∂W
//                                is compute of the backward pass, as the engine runs it
//   pipeline (1F1B):             (m + p − 1) · max_s S_s — the bubble is (p−1)/(m+p−1) of it
//   after the last backward:     DP gradient all-reduce, overlapped with the last micro-batch's
//                                backward: exposed max(last bucket, all-reduce − backward);
//                                ZeRO-1: reduce-scatter + all-gather, both exposed;
//                                then the optimizer (element-wise over the rank's parameters).
// Memory per rank: fp32 weights and gradients, AdamW's two fp32 moments (/dp with ZeRO-1), the bf16
// weight copy in bf16, and the activations kept per block × blocks on the stage × micro-batches in
// flight (min(m, p − s) under 1F1B), plus the recomputation area and a workspace estimate.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "kernels/cross_entropy.h"
#include "model/config.h"
#include "parallel/layout.h"
#include "plan/cost.h"
#include "plan/hardware.h"

namespace boostlm::plan {

struct StepConfig {
  LayoutKind layout = LayoutKind::btp;
  ModelConfig config;
  BlockOptions options;
  int tp = 1, pp = 1, dp = 1;
  int64_t micro_batch = 1;    // sequences per micro-batch
  int64_t micro_batches = 1;  // per DP rank per step (gradient accumulation / pipeline depth)
  int64_t seq_len = 1;
  DType precision = DType::bf16;
  bool zero1 = false;
  int64_t bucket_bytes = int64_t{16} << 20;  // DP all-reduce buckets (the engine's default)
  double activation_bytes = 0;  // per activation element; 0: from the precision and hardware
  // Whether a GPU step replays its kernels from CUDA graphs where the engine can (--cuda-graph,
  // on by default); the paper's rows set it off, as their runs launched every kernel.
  bool cuda_graphs = true;
  // Whether the rank's memory holds the CUDA backend's attention scratch (dS tiles, bf16 only):
  // a GPU's; not the host memory train's check counts.
  bool device_attention_scratch = true;
  // Logit elements per LM-head chunk: a GPU's (the CUDA backend's), or the host's for train's
  // check (kernels/cross_entropy.h).
  int64_t logits_chunk_elements = kDeviceLogitsChunkElements;

  int world() const { return tp * pp * dp; }
  int64_t global_batch() const { return micro_batch * micro_batches * dp; }
};

struct MemoryEstimate {
  double weights = 0, grads = 0, optimizer = 0, weights_bf16 = 0;  // bytes per rank
  double activations = 0, workspace = 0;
  // Host memory, not the device's: the staging buffer a checkpoint is copied into before it is
  // written in the background (checkpoint/saver.h), at most the rank's weights and moments.
  double checkpoint_staging = 0;
  double capacity = 0;
  double total() const {
    return weights + grads + optimizer + weights_bf16 + activations + workspace;
  }
  bool fits() const { return total() <= capacity; }
};

struct StepPrediction {
  double step_s = 0;
  // The step's time, part by part on the slowest stage (they sum to step_s).
  WorkSeconds micro_batches;  // m × one micro-batch: GEMM, attention, element-wise, TP comm
  double pp_comm_s = 0, bubble_s = 0, dp_exposed_s = 0, optimizer_s = 0;
  double dp_comm_s = 0;  // the whole DP reduction, exposed or not
  double compute_s() const { return micro_batches.compute(); }
  double exposed_comm_s() const { return micro_batches.comm + pp_comm_s + dp_exposed_s; }
  int bottleneck_stage = 0;
  double gemm_utilisation = 0;  // GEMM FLOPs / (GEMM seconds · peak), one micro-batch's blocks
  double tokens_per_s = 0, mfu = 0;
  MemoryEstimate memory;                  // the rank with the most
  std::string tp_link, dp_link, pp_link;  // "intra-node" / "inter-node"
};

// Bytes one rank of pipeline stage `stage` holds (capacity left 0), activations stored with
// `bytes_per_activation` bytes per element.
MemoryEstimate rank_memory(const StepConfig& config, int stage, double bytes_per_activation);

// Throws Error when the layout cannot run this configuration (divisibility, architecture).
void check_step_config(const StepConfig& config);
StepPrediction predict_step(const Hardware& hardware, const StepConfig& config);

}  // namespace boostlm::plan
