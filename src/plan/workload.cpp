#include "plan/workload.h"

#include <algorithm>

#include "model/lax.h"
#include "model/params.h"
#include "parallel/comm_formulas.h"
#include "parallel/layout_cost.h"
#include "plan/hardware.h"  // kFusedAttentionBackwardProducts

namespace boostlm::plan {

namespace {

// The Work of one micro-batch on one rank: where a layout's description (LayoutCost) and the
// model around the blocks put their GEMMs, element-wise passes and attention.
struct Builder final : WorkSink {
  const MicroBatchShape& mb;
  Work w;
  int64_t N, d, t, hd;

  explicit Builder(const MicroBatchShape& m)
      : mb(m), N(m.tokens()), d(m.config.d_model), t(m.tp), hd(m.config.head_dim()) {}

  void gemm(int64_t m, int64_t n, int64_t k, bool own_call = true) override {
    w.gemms.push_back({m, n, k, own_call});
  }
  void elementwise(double elements, double passes, double residual_passes = 0) override {
    w.elementwise_elements += elements * passes;
    w.residual_elements += elements * residual_passes;
    w.elementwise_kernels += 1;
  }
  // The engine's attention, like FlashAttention, recomputes the probabilities in backward:
  // counted as FlashAttention-2's, 2.5× the forward's FLOPs (five products of the forward's size
  // against two); a device whose kernels run more prices them (plan/cost.h).
  void attention(int64_t h, int64_t kvh, bool backward) override {
    const double T = static_cast<double>(mb.seq_len);
    const double forward = 2.0 * hd * T * (T + 1) * h * mb.batch;  // as model_flops counts it
    const double flops = backward ? kFusedAttentionBackwardProducts / 2 * forward : forward;
    w.attention_flops += flops;
    if (backward) w.attention_backward_flops += flops;
    const double io = static_cast<double>(N) * (2 * h + 2 * kvh) * hd;  // q, k, v, out
    w.attention_elements += backward ? 2.0 * io : io;
    w.attention_calls += 1;
  }
};

// One block's forward or backward as its layout describes it, with its collectives.
Work block_work(const MicroBatchShape& mb, bool backward) {
  Builder b(mb);
  layout_cost(mb.layout).block_work(block_setting(mb), backward, b);
  b.w.tp = block_tp_comm(mb.layout, mb.config, mb.tokens(), mb.tp, backward, mb.options);
  return b.w;
}

Work lowrank_recompute(const MicroBatchShape& mb) {
  Builder b(mb);
  layout_cost(mb.layout).lowrank_recompute_work(block_setting(mb), b);
  return b.w;
}

}  // namespace

double Work::gemm_flops() const {
  double f = 0;
  for (const auto& g : gemms) f += g.flops();
  return f;
}

Work& Work::operator+=(const Work& o) {
  gemms.insert(gemms.end(), o.gemms.begin(), o.gemms.end());
  elementwise_elements += o.elementwise_elements;
  elementwise_kernels += o.elementwise_kernels;
  residual_elements += o.residual_elements;
  attention_flops += o.attention_flops;
  attention_backward_flops += o.attention_backward_flops;
  attention_elements += o.attention_elements;
  attention_calls += o.attention_calls;
  tp += o.tp;
  return *this;
}

BlockSetting block_setting(const MicroBatchShape& mb) {
  return {mb.config, mb.options, mb.tokens(), mb.tp};
}

Work block_forward_work(const MicroBatchShape& mb) {
  return block_work(mb, false);
}
Work block_backward_work(const MicroBatchShape& mb) {
  return block_work(mb, true);
}

Work block_recompute_work(const MicroBatchShape& mb) {
  switch (mb.options.recompute) {
    case Recompute::none:
      return {};
    case Recompute::lowrank:
      return lowrank_recompute(mb);
    case Recompute::block:
      return block_forward_work(mb);
  }
  return {};
}

Work lax_crossing_work(const MicroBatchShape& mb, bool backward) {
  Builder b(mb);
  const ModelConfig& c = mb.config;
  if (c.arch != Arch::lax) return b.w;
  const int64_t N = mb.tokens();
  const bool split = layout_traits(mb.layout).shards_ranks;
  for (const auto& p : block_projections(c)) {
    const int64_t r = p.rank, rl = split ? r / mb.tp : r;
    if (!backward) {
      b.gemm(N, rl, r);                               // s = u + h_{l−1} G
      b.elementwise(static_cast<double>(N) * rl, 4);  // h_{l−1}, the norm, z
    } else {
      b.gemm(r, rl, N);                               // ∂G = h_{l−1}ᵀ ∂s
      b.gemm(N, r, rl);                               // ∂h_{l−1} = ∂s Gᵀ
      b.elementwise(static_cast<double>(N) * rl, 6);  // the carry, σ', h_{l−1}, the norm
    }
  }
  // The same element-wise and collective figures per --tp-overlap chunk, as block_work's.
  b.w.tp = block_lax_comm(mb.layout, c, 1, N, mb.tp, backward, mb.options);
  return b.w;
}

int64_t head_chunk_rows(const MicroBatchShape& mb) {
  const int64_t vocab_rows = mb.config.vocab_size / mb.tp;
  return logits_chunk_rows(vocab_rows, mb.tokens(), mb.logits_chunk_elements);
}

Work embedding_work(const MicroBatchShape& mb) {
  Builder b(mb);
  const double N = static_cast<double>(b.N);
  b.elementwise(N * b.d, 1);  // lookup
  b.elementwise(N * b.d, 2);  // backward: scatter-add into the gradient rows
  if (mb.tp > 1) {
    Collective kind = Collective::all_reduce;
    b.w.tp[kind].calls += 1;  // the lookup's sum over vocabulary slices
    b.w.tp[kind].bytes += b.N * b.d * 4;
    if (layout_traits(mb.layout).hidden_sharded_residual) {  // own columns out, whole rows back
      b.elementwise(N * b.d / b.t, 2);
      b.elementwise(N * b.d, 2);
      b.w.tp[Collective::all_gather].calls += 1;
      b.w.tp[Collective::all_gather].bytes += b.N * b.d / b.t * 4;
    }
  }
  return b.w;
}

Work head_weight_gradient_work(const MicroBatchShape& mb) {
  Builder b(mb);
  const int64_t vocab = mb.config.vocab_size / mb.tp, chunk = head_chunk_rows(mb);
  for (int64_t r0 = 0; r0 < b.N; r0 += chunk) b.gemm(vocab, b.d, std::min(chunk, b.N - r0));
  return b.w;
}

Work head_work(const MicroBatchShape& mb, bool weight_gradient) {
  Builder b(mb);
  const double N = static_cast<double>(b.N);
  const int64_t vocab = mb.config.vocab_size / mb.tp, chunk = head_chunk_rows(mb);
  b.elementwise(N * b.d, 2, 1);  // final norm (x: the residual)
  b.elementwise(N * b.d, 4, 1);  // and its backward
  for (int64_t r0 = 0; r0 < b.N; r0 += chunk) {
    const int64_t rows = std::min(chunk, b.N - r0);
    b.gemm(rows, vocab, b.d);  // logits
    b.elementwise(static_cast<double>(rows) * vocab,
                  mb.tp > 1 ? 5 : 3);               // max, Σexp, gradient in place
    if (weight_gradient) b.gemm(vocab, b.d, rows);  // dW_head
    b.gemm(rows, b.d, vocab);                       // dx
  }
  // The head's collectives are outer_tp_comm's minus the embedding's.
  CommCounts outer = outer_tp_comm(mb.layout, mb.config, b.N, mb.tp, (b.N + chunk - 1) / chunk,
                                   /*backward=*/true);
  b.w.tp = outer - embedding_work(mb).tp;
  if (layout_traits(mb.layout).hidden_sharded_residual && mb.tp > 1)
    b.elementwise(N * b.d, 4);  // gather, take columns
  return b.w;
}

Work whole_model_work(const MicroBatchShape& mb) {
  Work w = embedding_work(mb);
  w += head_work(mb);
  const Work fwd = block_forward_work(mb), bwd = block_backward_work(mb),
             re = block_recompute_work(mb);
  const int64_t L = mb.config.n_layers;
  const Work lax_fwd = lax_crossing_work(mb, false), lax_bwd = lax_crossing_work(mb, true);
  for (int64_t l = 0; l < L; ++l) {
    w += fwd;
    w += bwd;
    if (has_lax_crossing(mb.config, l)) {
      w += lax_fwd;
      w += lax_bwd;
    }
    // The engine skips recomputing the block whose intermediates are still in place: the last.
    if (l + 1 < L) w += re;
    if (l + 1 < L && mb.options.recompute == Recompute::block && has_lax_crossing(mb.config, l))
      w += lax_fwd;  // a rerun block crosses its latents again
  }
  return w;
}

}  // namespace boostlm::plan
