// LaX's latent crossing (model/lax.h) inside any layout: the chain of each projection's latent from
// one block to the next, written once for every layout. A layout hands its groups' latents here
// once they are whole over the rows it computes — btp after the latent's all-reduce, replicated on
// every rank, so the gate and the norm need no collective at all; naive-tp with the latent split
// over r, r/t columns per rank, where the crossing communicates (per member, layer ≥ 1):
//   forward   all-gather of h_{l−1} (N·r), all-reduce of the norm's [Σs, Σs²] (2N)
//   backward  all-gather of h_{l−1} again (N·r: recomputed rather than kept), all-reduce of the
//             norm's [Σg, Σg·x̂] (2N), reduce-scatter of ∂L/∂h_{l−1} (N·r), and with the Kronecker
//             gate an all-reduce of its factors' gradients (p² + q²), which every rank holds whole
//             but sees only its columns of
// (parallel/comm_formulas.cpp counts them).
#include <algorithm>

#include "core/device.h"
#include "core/error.h"
#include "kernels/activation.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/lax.h"
#include "parallel/layout.h"

namespace boostlm {

namespace {
constexpr float kLaxNormEps = 1e-6f;  // the LaX authors' LayerNorm eps
}

void Layout::allocate_lax(int64_t N) {
  lax_kept_.clear();
  if (!lax()) return;
  lax_kept_.resize(layers() * micro_slots_);  // per block even when whole blocks are recomputed
  int64_t widest = 0, widest_full = 0, full_total = 0, factors = 0;
  const auto dims = block_projections(config_);
  for (LaxKept& k : lax_kept_) {
    for (const Group& g : kGroups) {
      const int64_t width = group_width(members(first_layer_, g));
      k.pre[g.index].resize(N * width);
      k.rstd[g.index].resize(N * g.count);
    }
  }
  for (const Group& g : kGroups) {
    const int64_t width = group_width(members(first_layer_, g));
    widest = std::max(widest, width);
    int64_t full = 0;
    for (int m = 0; m < g.count; ++m) {
      const int64_t r = dims[g.first + m].rank;
      full += r;
      widest_full = std::max(widest_full, r);
      const auto [p, q] = kron_factors(r);
      factors = std::max(factors, p * p + q * q);
    }
    full_total = std::max(full_total, full);
    lax_carry_[g.index].resize(N * width);
    lax_carry_layer_[g.index] = -1;
  }
  lax_z_.resize(N * widest);
  lax_h_.resize(N * std::max(widest, full_total));
  lax_stats_.resize(2 * N);
  lax_k_.resize(widest_full * widest_full);
  lax_dk_.resize(widest_full * widest_full);
  lax_dfactor_.resize(factors);
  lax_ds_.resize(N * widest);
  lax_gather_.resize(N * widest_full);
}

int64_t Layout::lax_bytes(const LaxKept& k) const {
  int64_t n = 0;
  for (const auto& b : k.pre) n += b.size();
  for (const auto& b : k.rstd) n += b.size();
  return n * static_cast<int64_t>(sizeof(float));
}

GemmInput Layout::lax_gate_columns(const LaxWeights& w, int64_t& ld) {
  if (!w.kron) {
    ld = w.r_local;
    return {w.gate, ld};
  }
  kron_expand(w.kron_p, w.p, w.kron_q, w.q, lax_k_.data());
  ld = w.rank;
  return {lax_k_.data() + w.r_begin, ld};
}

const float* Layout::lax_latent(int64_t layer, const Group& g) {
  LaxKept& k = lax_kept_[lax_slot(layer)];
  const float* pre = k.pre[g.index].data();
  if (!has_lax_crossing(config_, layer)) return pre;  // block 0: z = u
  const ProjectionGroup group = members(layer, g);
  const int64_t N = batch_ * seq_len_, width = group_width(group);
  int64_t c0 = 0;
  for (int m = 0; m < g.count; ++m) {
    const LaxWeights& w = blocks_[layer].lax[g.first + m];
    lax_norm_apply(pre + c0, width, N, w.r_local, w.norm_weight, w.norm_bias, lax_z_.data() + c0,
                   width);
    c0 += group[m].rank;
  }
  return lax_z_.data();
}

int64_t Layout::lax_boundary_columns() const {
  if (!lax()) return 0;
  int64_t cols = 0;
  for (const Group& g : kGroups) cols += group_width(members(first_layer_, g));
  return cols;
}

namespace {
// Where group g's h starts in a boundary buffer: the groups before it, N rows each.
template <typename Widths>
int64_t boundary_offset(int g, int64_t N, Widths width_of) {
  int64_t at = 0;
  for (int i = 0; i < g; ++i) at += N * width_of(i);
  return at;
}
}  // namespace

void Layout::lax_chain_out(float* out) {
  const int64_t N = batch_ * seq_len_, layer = last_layer_ - 1;
  int64_t at = 0;
  for (const Group& g : kGroups) {
    const int64_t width = group_width(members(layer, g));
    const float* z = lax_latent(layer, g);
    if (config_.latent_act())
      silu_forward(z, width, N, width, out + at, width);
    else
      copy_values(z, N * width, out + at);
    at += N * width;
  }
}

void Layout::lax_set_carry_in(const float* d) {
  const int64_t N = batch_ * seq_len_;
  int64_t at = 0;
  for (const Group& g : kGroups) {
    const int64_t width = group_width(members(last_layer_ - 1, g));
    copy_values(d + at, N * width, lax_carry_[g.index].data());
    lax_carry_layer_[g.index] = last_layer_;
    at += N * width;
  }
}

void Layout::lax_carry_out(float* d) const {
  const int64_t N = batch_ * seq_len_;
  int64_t at = 0;
  for (const Group& g : kGroups) {
    const int64_t width = group_width(members(first_layer_, g));
    BOOSTLM_ASSERT_MSG(lax_carry_layer_[g.index] == first_layer_,
                       "LaX: the stage's first block has not run its backward");
    copy_values(lax_carry_[g.index].data(), N * width, d + at);
    at += N * width;
  }
}

void Layout::lax_chain_latent(int64_t layer, const Group& g) {
  const int64_t N = batch_ * seq_len_;
  const bool split = sharding().latents_split && tp_.size() > 1;
  // h = σ(z) (or z), this rank's columns: into lax_h_ when whole, else into lax_ds_, gathered
  // member by member into lax_h_ (each member [N, r] after the one before; lax_gather_, sized
  // for the widest member, receives the ranks' blocks). The block before this stage's first: what
  // the stage before sent.
  float* local = split ? lax_ds_.data() : lax_h_.data();
  if (layer < first_layer_) {
    BOOSTLM_ASSERT_MSG(lax_chain_in_, "LaX: no latents from the stage before");
    const int64_t width = group_width(members(first_layer_, g));
    const int64_t at = boundary_offset(g.index, N, [&](int i) {
      return group_width(members(first_layer_, kGroups[i]));
    });
    copy_values(lax_chain_in_ + at, N * width, local);
    layer = first_layer_;  // only for the members' shapes below
  } else {
    const int64_t width = group_width(members(layer, g));
    const float* z = lax_latent(layer, g);
    if (config_.latent_act())
      silu_forward(z, width, N, width, local, width);
    else
      copy_columns(z, width, N, width, local, width);
  }
  const ProjectionGroup group = members(layer, g);
  const int64_t width = group_width(group);
  lax_h_ld_ = width;
  if (!split) return;
  // The members one after another, each whole: an all-gather of its [N, r/t] columns.
  const int t = tp_.size();
  const bool bf16 = options_.activations == DType::bf16;
  int64_t c0 = 0, out = 0;
  for (const ProjectionWeights& p : group) {
    const int64_t rl = p.rank;
    if (bf16) {
      // bf16 training (issue 60): through the gather buffer, which as bf16 has room for twice
      // its fp32 elements.
      all_gather_columns_bf16(tp_, local + c0, width, N, rl,
                              reinterpret_cast<bf16_t*>(lax_gather_.data()), lax_h_.data() + out,
                              rl * t);
    } else {
      Buffer<float>& packed = lax_z_;  // free here: z was consumed by σ above
      copy_columns(local + c0, width, N, rl, packed.data(), rl);
      tp_.all_gather(packed.data(), N * rl, lax_gather_.data());
      concat_columns(lax_gather_.data(), t, N, rl, lax_h_.data() + out);
    }
    c0 += rl;
    out += N * rl * t;
  }
}

const float* Layout::lax_forward(int64_t layer, const Group& g, const float* u, int64_t ldu) {
  LaxKept& k = lax_kept_[lax_slot(layer)];
  const ProjectionGroup group = members(layer, g);
  const int64_t N = batch_ * seq_len_, width = group_width(group);
  float* pre = k.pre[g.index].data();
  if (!has_lax_crossing(config_, layer)) {
    copy_columns(u, ldu, N, width, pre, width);
    return pre;
  }
  BOOSTLM_ASSERT_MSG(layer > first_layer_ || lax_chain_in_,
                     "LaX: the block before runs on another stage, which sent no latents");
  lax_chain_latent(layer - 1, g);  // h_{l−1}: lax_h_
  const bool split = sharding().latents_split && tp_.size() > 1;
  float* s = lax_z_.data();
  copy_columns(u, ldu, N, width, s, width);
  int64_t c0 = 0, h_off = 0;
  for (int m = 0; m < g.count; ++m) {
    const LaxWeights& w = blocks_[layer].lax[g.first + m];
    const float* h = split ? lax_h_.data() + h_off : lax_h_.data() + c0;
    const int64_t ldh = split ? w.rank : lax_h_ld_;
    int64_t ldk = 0;
    const GemmInput gate = lax_gate_columns(w, ldk);
    // s = u + h_{l−1} G (this rank's columns of G)
    gemm(Trans::N, Trans::N, N, w.r_local, w.rank, 1.0f, GemmInput(h, ldh), gate, 1.0f, s + c0,
         width, compute_);
    lax_norm_partial_stats(s + c0, width, N, w.r_local, lax_stats_.data());
    if (split) tp_.all_reduce(lax_stats_.data(), 2 * N);
    lax_norm_forward(s + c0, width, lax_stats_.data(), N, w.r_local, w.rank, w.norm_weight,
                     w.norm_bias, kLaxNormEps, s + c0, width, pre + c0, width,
                     k.rstd[g.index].data() + m * N);
    c0 += w.r_local;
    h_off += N * w.rank;
  }
  return s;
}

void Layout::lax_backward(int64_t layer, const Group& g, float* d) {
  LaxKept& k = lax_kept_[lax_slot(layer)];
  const ProjectionGroup group = members(layer, g);
  const int64_t N = batch_ * seq_len_, width = group_width(group);
  // ∂L/∂h_l: from this block's B, and from the block above's gate.
  if (lax_carry_layer_[g.index] == layer + 1) add(d, lax_carry_[g.index].data(), d, N * width);
  lax_carry_layer_[g.index] = -1;
  group_activate_backward(group, lax_latent(layer, g), d, N);  // ∂L/∂z
  if (!has_lax_crossing(config_, layer)) return;
  lax_chain_latent(layer - 1, g);
  const bool split = sharding().latents_split && tp_.size() > 1;
  const float* pre = k.pre[g.index].data();
  int64_t c0 = 0, h_off = 0;
  for (int m = 0; m < g.count; ++m) {
    const LaxWeights& w = blocks_[layer].lax[g.first + m];
    const float* h = split ? lax_h_.data() + h_off : lax_h_.data() + c0;
    const int64_t ldh = split ? w.rank : lax_h_ld_;
    float* dm = d + c0;
    // The norm: ∂L/∂s in place of ∂L/∂z.
    lax_norm_partial_backward(dm, width, pre + c0, width, N, w.r_local, w.norm_weight,
                              lax_stats_.data());
    if (split) tp_.all_reduce(lax_stats_.data(), 2 * N);
    lax_norm_backward(dm, width, pre + c0, width, k.rstd[g.index].data() + m * N,
                      lax_stats_.data(), N, w.r_local, w.rank, w.norm_weight, dm, width,
                      w.dnorm_weight, w.dnorm_bias);
    // The gate: ∂G (this rank's columns) = h_{l−1}ᵀ ∂s; ∂h_{l−1} = ∂s Gᵀ, down the chain.
    int64_t ldk = 0;
    const GemmInput gate = lax_gate_columns(w, ldk);
    if (!w.kron) {
      gemm(Trans::T, Trans::N, w.rank, w.r_local, N, 1.0f, GemmInput(h, ldh), GemmInput(dm, width),
           1.0f, w.dgate, w.r_local, compute_);
    } else {
      const int64_t r = w.rank;
      if (split) device_zero(lax_dk_.data(), static_cast<size_t>(r * r) * sizeof(float));
      gemm(Trans::T, Trans::N, r, w.r_local, N, 1.0f, GemmInput(h, ldh), GemmInput(dm, width), 0.0f,
           lax_dk_.data() + w.r_begin, r, compute_);
      if (!split) {
        kron_factor_backward(lax_dk_.data(), w.kron_p, w.p, w.kron_q, w.q, w.dkron_p, w.dkron_q);
      } else {  // each rank saw its columns of ∂K: the factors' gradients are partial sums
        float* dp = lax_dfactor_.data();
        float* dq = dp + w.p * w.p;
        device_zero(dp, static_cast<size_t>(w.p * w.p + w.q * w.q) * sizeof(float));
        kron_factor_backward(lax_dk_.data(), w.kron_p, w.p, w.kron_q, w.q, dp, dq);
        tp_.all_reduce(dp, w.p * w.p + w.q * w.q);
        add(w.dkron_p, dp, w.dkron_p, w.p * w.p);
        add(w.dkron_q, dq, w.dkron_q, w.q * w.q);
      }
    }
    float* carry = lax_carry_[g.index].data() + c0;
    if (!split) {
      gemm(Trans::N, Trans::T, N, w.rank, w.r_local, 1.0f, GemmInput(dm, width), gate, 0.0f, carry,
           width, compute_);
    } else {
      // ∂h_{l−1} [N, r] is a partial sum over the ranks' columns of G: reduce-scatter it, each rank
      // keeping its r/t columns. Laid out as t column blocks one after another for the collective.
      const int t = tp_.size();
      const int64_t rl = w.r_local;
      gemm(Trans::N, Trans::T, N, w.rank, rl, 1.0f, GemmInput(dm, width), gate, 0.0f,
           lax_gather_.data(), w.rank, compute_);
      float* blocks = lax_h_.data() + h_off;  // h_{l−1} of this member is used up
      for (int i = 0; i < t; ++i)
        copy_columns(lax_gather_.data() + i * rl, w.rank, N, rl, blocks + i * N * rl, rl);
      tp_.reduce_scatter(blocks, lax_gather_.data(), std::vector<int64_t>(t, N * rl));
      copy_columns(lax_gather_.data(), rl, N, rl, carry, width);
    }
    c0 += w.r_local;
    h_off += N * w.rank;
  }
  lax_carry_layer_[g.index] = layer;
}

}  // namespace boostlm
