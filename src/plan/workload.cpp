#include "plan/workload.h"

#include <algorithm>

#include "model/params.h"
#include "parallel/comm_formulas.h"

namespace boostlm::plan {

namespace {

// Local dimensions of one micro-batch on one rank, and helpers that append work.
struct Builder {
  const MicroBatch& mb;
  Work w;
  int64_t N, d, kv, ff, t, heads, kv_heads, hd;
  bool cola;

  explicit Builder(const MicroBatch& m)
      : mb(m),
        N(m.tokens()),
        d(m.config.d_model),
        kv(m.config.kv_dim()),
        ff(m.config.d_ff),
        t(m.tp),
        heads(m.config.n_heads),
        kv_heads(m.config.n_kv_heads),
        hd(m.config.head_dim()),
        cola(m.config.arch == Arch::cola) {}

  void gemm(int64_t m, int64_t n, int64_t k, bool own_call = true) {
    w.gemms.push_back({m, n, k, own_call});
  }
  // One element-wise kernel touching `elements` × `passes` elements (reads plus writes).
  void ew(double elements, double passes) {
    w.elementwise_elements += elements * passes;
    w.elementwise_kernels += 1;
  }
  // Causal attention over `h` query heads and `kvh` kv heads on this rank. The engine's
  // attention, like FlashAttention, recomputes the probabilities in backward: backward does
  // 2.5× the forward's FLOPs (five products of the forward's size against two).
  void attention(int64_t h, int64_t kvh, bool backward) {
    const double T = static_cast<double>(mb.seq_len);
    const double forward = 2.0 * hd * T * (T + 1) * h * mb.batch;  // as model_flops counts it
    w.attention_flops += backward ? 2.5 * forward : forward;
    const double io = static_cast<double>(N) * (2 * h + 2 * kvh) * hd;  // q, k, v, out
    w.attention_elements += backward ? 2.0 * io : io;
    w.attention_calls += 1;
  }
  void rope(int64_t q_cols, int64_t k_cols) { ew(static_cast<double>(N) * (q_cols + k_cols), 2); }
  void comm(bool backward) {
    w.tp += block_tp_comm(mb.layout, mb.config, N, mb.tp, backward, mb.options);
  }
};

// dense (dense-tp): W local [d_in, d_out]; y = x W.
void dense_projection_forward(Builder& b, int64_t d_in, int64_t d_out) {
  b.gemm(b.N, d_out, d_in);
}
void dense_projection_backward(Builder& b, int64_t d_in, int64_t d_out) {
  b.gemm(d_out, d_in, b.N);  // dW = dyᵀ x
  b.gemm(b.N, d_in, d_out);  // dx = dy W
}

// The local (d_in, d_out) of each projection under dense-tp: column-parallel q, k, v, gate, up;
// row-parallel o, down.
std::array<std::pair<int64_t, int64_t>, kProjectionsPerBlock> dense_tp_dims(const Builder& b) {
  const int64_t t = b.t;
  return {{{b.d, b.d / t},
           {b.d, b.kv / t},
           {b.d, b.kv / t},
           {b.d / t, b.d},
           {b.d, b.ff / t},
           {b.d, b.ff / t},
           {b.ff / t, b.d}}};
}

// The element-wise work every layout does around its GEMMs, at local widths: two norms (forward
// read + write; backward reads dy, x, dx and writes dx), RoPE on q and k, SwiGLU (3 passes
// forward, 5 backward), two residual adds (3 passes).
void norms_rope_swiglu(Builder& b, int64_t norm_cols, int64_t q_cols, int64_t k_cols,
                       int64_t ff_cols, int64_t resid_cols, bool backward) {
  const double N = static_cast<double>(b.N);
  for (int i = 0; i < 2; ++i) b.ew(N * norm_cols, backward ? 4 : 2);
  b.rope(q_cols, k_cols);
  b.ew(N * ff_cols, backward ? 5 : 3);
  if (!backward)
    for (int i = 0; i < 2; ++i) b.ew(N * resid_cols, 3);
}

Work dense_tp_block(const MicroBatch& mb, bool backward) {
  Builder b(mb);
  for (const auto& [d_in, d_out] : dense_tp_dims(b)) {
    if (backward)
      dense_projection_backward(b, d_in, d_out);
    else
      dense_projection_forward(b, d_in, d_out);
  }
  b.attention(b.heads / b.t, b.kv_heads / b.t, backward);
  norms_rope_swiglu(b, b.d, b.d / b.t, b.kv / b.t, b.ff / b.t, b.d, backward);
  b.comm(backward);
  return b.w;
}

// btp's four groups: q|k|v (reads norm1), o, gate|up (reads norm2), down.
struct ProjectionGroup {
  int first, count;
  bool normed;
};
constexpr ProjectionGroup kGroups[] = {{0, 3, true}, {3, 1, false}, {4, 2, true}, {6, 1, false}};

// Whether member j of a group joins member j−1's batched call for the B factors (grouping: the
// engine batches consecutive members of one shape, whose weights then lie evenly spaced).
bool batched_with_previous(const MicroBatch& mb,
                           const std::array<ProjDims, kProjectionsPerBlock>& proj,
                           const ProjectionGroup& g, int j) {
  if (!mb.options.grouping || j == 0) return false;
  const ProjDims &p = proj[g.first + j - 1], &q = proj[g.first + j];
  return p.rank == q.rank && p.d_out == q.d_out;
}

// naive-tp: every factorised projection is (d_in → r/t → d_out) on every rank; attention, norms,
// RoPE and SwiGLU run replicated at full width. With grouping a group's A shards run as one GEMM
// on their concatenation (rebuilt each forward; dA taken apart in backward); σ runs per group.
Work naive_tp_block(const MicroBatch& mb, bool backward) {
  Builder b(mb);
  const double N = static_cast<double>(b.N);
  const auto proj = block_projections(mb.config);
  for (const auto& g : kGroups) {
    const int64_t d_in = proj[g.first].d_in;
    const bool grouped = mb.options.grouping && g.count > 1;
    int64_t width = 0;
    for (int j = 0; j < g.count; ++j) width += proj[g.first + j].rank / b.t;
    if (!backward) {
      if (grouped) {
        b.gemm(b.N, width, d_in);  // z = x [A…]
        b.ew(static_cast<double>(d_in) * width, 2);
      } else {
        for (int j = 0; j < g.count; ++j) b.gemm(b.N, proj[g.first + j].rank / b.t, d_in);
      }
      if (b.cola) b.ew(N * width, 2);
      for (int j = 0; j < g.count; ++j)
        b.gemm(b.N, proj[g.first + j].d_out, proj[g.first + j].rank / b.t,  // y = σ(z) B
               !batched_with_previous(mb, proj, g, j));
    } else {
      for (int j = 0; j < g.count; ++j) {
        const ProjDims& p = proj[g.first + j];
        const bool own_call = !batched_with_previous(mb, proj, g, j);
        b.gemm(p.rank / b.t, p.d_out, b.N, own_call);  // dB
        b.gemm(b.N, p.rank / b.t, p.d_out, own_call);  // dσ
      }
      if (b.cola) b.ew(N * width, 3);
      if (grouped) {
        b.gemm(d_in, width, b.N);  // dA of the concatenation
        b.ew(static_cast<double>(d_in) * width, 3);
        b.gemm(b.N, d_in, width);  // dx
      } else {
        for (int j = 0; j < g.count; ++j) {
          b.gemm(d_in, proj[g.first + j].rank / b.t, b.N);
          b.gemm(b.N, d_in, proj[g.first + j].rank / b.t);
        }
      }
    }
  }
  if (!backward && mb.options.grouping) {  // unpacking the shared all-reduces
    b.ew(N * (b.d + 2 * b.kv), 2);
    b.ew(N * 2 * b.ff, 2);
  }
  b.attention(b.heads, b.kv_heads, backward);
  norms_rope_swiglu(b, b.d, b.d, b.kv, b.ff, b.d, backward);
  b.comm(backward);
  return b.w;
}

// The local output columns of projection i under btp (its heads, d_ff slice or d slice).
int64_t btp_out_cols(const Builder& b, const ProjDims& p) {
  return p.d_out / b.t;
}

void btp_group_forward(Builder& b, const ProjectionGroup& g,
                       const std::array<ProjDims, kProjectionsPerBlock>& proj) {
  const double N = static_cast<double>(b.N);
  const int64_t d_in = proj[g.first].d_in / b.t;
  const bool online = g.normed && b.mb.options.online_norm;
  if (g.normed) {
    b.ew(N * d_in, 1);               // Σx² of the local shard
    b.ew(N * d_in, online ? 2 : 3);  // x ⊙ γ (online), or the synchronous norm's output
  }
  int64_t width = 0;
  for (int j = 0; j < g.count; ++j) width += proj[g.first + j].rank;
  if (b.mb.options.grouping && g.count > 1) {
    b.gemm(b.N, width, d_in);
    b.ew(static_cast<double>(d_in) * width, 2);  // the concatenated A, rebuilt each forward
  } else {
    for (int j = 0; j < g.count; ++j) b.gemm(b.N, proj[g.first + j].rank, d_in);
  }
  b.ew(N * width, 2);              // unpacking the all-reduced latents (÷ rms when online)
  if (b.cola) b.ew(N * width, 2);  // σ(z) of the group, replicated
  for (int j = 0; j < g.count; ++j) {
    const ProjDims& p = proj[g.first + j];
    b.gemm(b.N, btp_out_cols(b, p), p.rank, !batched_with_previous(b.mb, proj, g, j));
  }
}

void btp_group_backward(Builder& b, const ProjectionGroup& g,
                        const std::array<ProjDims, kProjectionsPerBlock>& proj) {
  const double N = static_cast<double>(b.N);
  const int64_t d_in = proj[g.first].d_in / b.t;
  const bool grouped = b.mb.options.grouping && g.count > 1;
  int64_t width = 0;
  for (int j = 0; j < g.count; ++j) {
    const ProjDims& p = proj[g.first + j];
    width += p.rank;
    const bool own_call = !batched_with_previous(b.mb, proj, g, j);
    b.gemm(p.rank, btp_out_cols(b, p), b.N, own_call);  // dB
    b.gemm(b.N, p.rank, btp_out_cols(b, p), own_call);  // dσ
    if (!grouped && g.count > 1) b.ew(N * p.rank, 4);   // its columns, gathered
  }
  if (b.cola) b.ew(N * width, 3);  // σ' of the group
  const bool online = g.normed && b.mb.options.online_norm;
  if (online) {
    b.ew(N * width, 3);  // Σ dZ⊙Z per token and dZ·rstd
    b.ew(N * d_in, 2);   // x ⊙ γ again
  }
  if (grouped) {
    b.gemm(d_in, width, b.N);
    b.ew(static_cast<double>(d_in) * width, 3);  // dA of each member from the concatenation
    b.gemm(b.N, d_in, width);
  } else {
    for (int j = 0; j < g.count; ++j) {
      b.gemm(d_in, proj[g.first + j].rank, b.N);
      b.gemm(b.N, d_in, proj[g.first + j].rank);
    }
  }
  if (g.normed) {
    b.ew(N * d_in, 4);  // dx += …
    b.ew(N * d_in, 2);  // dγ
  }
}

Work btp_block(const MicroBatch& mb, bool backward) {
  Builder b(mb);
  const auto proj = block_projections(mb.config);
  const double N = static_cast<double>(b.N);
  const int64_t dl = b.d / b.t, kvl = b.kv / b.t, ffl = b.ff / b.t;
  for (const auto& g : kGroups) {
    if (backward)
      btp_group_backward(b, g, proj);
    else
      btp_group_forward(b, g, proj);
  }
  b.attention(b.heads / b.t, b.kv_heads / b.t, backward);
  b.rope(dl, kvl);
  b.ew(N * ffl, backward ? 5 : 3);  // SwiGLU
  if (!backward)
    for (int i = 0; i < 2; ++i) b.ew(N * dl, 3);  // residual adds
  b.comm(backward);
  return b.w;
}

Work block_work(const MicroBatch& mb, bool backward) {
  switch (mb.layout) {
    case LayoutKind::dense_tp:
      return dense_tp_block(mb, backward);
    case LayoutKind::naive_tp:
      return naive_tp_block(mb, backward);
    case LayoutKind::btp:
      return btp_block(mb, backward);
  }
  return {};
}

// btp's lowrank recomputation (btp.cpp recompute()): B of q, k, v, gate, up, σ of every latent,
// RoPE, attention, SwiGLU — local work only, no collective.
Work btp_lowrank_recompute(const MicroBatch& mb) {
  Builder b(mb);
  const auto proj = block_projections(mb.config);
  const double N = static_cast<double>(b.N);
  for (const auto& g : {kGroups[0], kGroups[2]})  // q|k|v and gate|up
    for (int j = 0; j < g.count; ++j)
      b.gemm(b.N, btp_out_cols(b, proj[g.first + j]), proj[g.first + j].rank,
             !batched_with_previous(mb, proj, g, j));
  if (b.cola)  // σ of each group's latents
    for (const auto& g : kGroups) {
      int64_t width = 0;
      for (int j = 0; j < g.count; ++j) width += proj[g.first + j].rank;
      b.ew(N * width, 2);
    }
  if (!mb.options.online_norm)
    for (int i = 0; i < 2; ++i) b.ew(N * b.d / b.t, 3);
  b.rope(b.d / b.t, b.kv / b.t);
  b.attention(b.heads / b.t, b.kv_heads / b.t, false);
  b.ew(N * b.ff / b.t, 3);
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
  attention_flops += o.attention_flops;
  attention_elements += o.attention_elements;
  attention_calls += o.attention_calls;
  tp += o.tp;
  return *this;
}

Work block_forward(const MicroBatch& mb) {
  return block_work(mb, false);
}
Work block_backward(const MicroBatch& mb) {
  return block_work(mb, true);
}

Work block_recompute(const MicroBatch& mb) {
  switch (mb.options.recompute) {
    case Recompute::none:
      return {};
    case Recompute::lowrank:
      return btp_lowrank_recompute(mb);
    case Recompute::block:
      return block_forward(mb);
  }
  return {};
}

int64_t head_chunk_rows(const MicroBatch& mb) {
  const int64_t vocab_rows = mb.config.vocab_size / mb.tp;
  return logits_chunk_rows(vocab_rows, mb.tokens());
}

Work embedding_work(const MicroBatch& mb) {
  Builder b(mb);
  const double N = static_cast<double>(b.N);
  b.ew(N * b.d, 1);  // lookup
  b.ew(N * b.d, 2);  // backward: scatter-add into the gradient rows
  if (mb.tp > 1) {
    Collective kind = Collective::all_reduce;
    b.w.tp[kind].calls += 1;  // the lookup's sum over vocabulary slices
    b.w.tp[kind].bytes += b.N * b.d * 4;
    if (layout_traits(mb.layout).hidden_sharded_residual) {  // own columns out, whole rows back
      b.ew(N * b.d / b.t, 2);
      b.ew(N * b.d, 2);
      b.w.tp[Collective::all_gather].calls += 1;
      b.w.tp[Collective::all_gather].bytes += b.N * b.d / b.t * 4;
    }
  }
  return b.w;
}

Work head_work(const MicroBatch& mb) {
  Builder b(mb);
  const double N = static_cast<double>(b.N);
  const int64_t vocab = mb.config.vocab_size / mb.tp, chunk = head_chunk_rows(mb);
  b.ew(N * b.d, 2);  // final norm
  b.ew(N * b.d, 4);  // and its backward
  for (int64_t r0 = 0; r0 < b.N; r0 += chunk) {
    const int64_t rows = std::min(chunk, b.N - r0);
    b.gemm(rows, vocab, b.d);                                    // logits
    b.ew(static_cast<double>(rows) * vocab, mb.tp > 1 ? 5 : 3);  // max, Σexp, gradient in place
    b.gemm(vocab, b.d, rows);                                    // dW_head
    b.gemm(rows, b.d, vocab);                                    // dx
  }
  // The head's collectives are outer_tp_comm's minus the embedding's.
  CommCounts outer = outer_tp_comm(mb.layout, mb.config, b.N, mb.tp, (b.N + chunk - 1) / chunk,
                                   /*backward=*/true);
  b.w.tp = outer - embedding_work(mb).tp;
  if (layout_traits(mb.layout).hidden_sharded_residual && mb.tp > 1)
    b.ew(N * b.d, 4);  // gather, take columns
  return b.w;
}

Work whole_model_work(const MicroBatch& mb) {
  Work w = embedding_work(mb);
  w += head_work(mb);
  const Work fwd = block_forward(mb), bwd = block_backward(mb), re = block_recompute(mb);
  const int64_t L = mb.config.n_layers;
  for (int64_t l = 0; l < L; ++l) {
    w += fwd;
    w += bwd;
    // The engine skips recomputing the block whose intermediates are still in place: the last.
    if (l + 1 < L) w += re;
  }
  return w;
}

}  // namespace boostlm::plan
