#include "train/lowrank_convert.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/svd.h"
#include "model/params.h"

namespace boostlm {

int64_t rank_for_energy(const std::vector<double>& sigma, double energy) {
  double total = 0;
  for (double s : sigma) total += s * s;
  double kept = 0;
  for (size_t r = 0; r < sigma.size(); ++r) {
    kept += sigma[r] * sigma[r];
    if (kept >= energy * total * (1 - 1e-12)) return static_cast<int64_t>(r) + 1;
  }
  return static_cast<int64_t>(sigma.size());
}

namespace {

bool is_attention(ProjKind kind) {
  return kind == ProjKind::q || kind == ProjKind::k || kind == ProjKind::v || kind == ProjKind::o;
}

// A = U_r √Σ_r and B = √Σ_r V_rᵀ of Wᵀ's SVD, and the measured relative error of A B.
void split_factors(const SvdResult& s, const float* w, int64_t rank, float* a, float* b,
                   ProjectionReport& report) {
  const int64_t d_in = s.m, d_out = s.n, k = s.k;
  for (int64_t i = 0; i < d_in; ++i)
    for (int64_t j = 0; j < rank; ++j)
      a[i * rank + j] = static_cast<float>(s.u[i * k + j] * std::sqrt(s.sigma[j]));
  for (int64_t j = 0; j < rank; ++j)
    for (int64_t o = 0; o < d_out; ++o)
      b[j * d_out + o] = static_cast<float>(std::sqrt(s.sigma[j]) * s.v[o * k + j]);
  double total = 0, kept = 0, err = 0, norm = 0;
  for (int64_t j = 0; j < k; ++j) total += s.sigma[j] * s.sigma[j];
  for (int64_t j = 0; j < rank; ++j) kept += s.sigma[j] * s.sigma[j];
  std::vector<double> row(d_out);
  for (int64_t i = 0; i < d_in; ++i) {
    std::fill(row.begin(), row.end(), 0.0);
    for (int64_t j = 0; j < rank; ++j) {
      const double aij = a[i * rank + j];
      for (int64_t o = 0; o < d_out; ++o) row[o] += aij * b[j * d_out + o];
    }
    for (int64_t o = 0; o < d_out; ++o) {
      const double wt = w[o * d_in + i];  // Wᵀ[i, o]
      err += (wt - row[o]) * (wt - row[o]);
      norm += wt * wt;
    }
  }
  report.kept_energy = total > 0 ? kept / total : 1.0;
  report.relative_error = norm > 0 ? std::sqrt(err / norm) : 0.0;
}

}  // namespace

LowRankResult to_low_rank(const ModelConfig& dense, const FlatBuffer& weights,
                          const LowRankOptions& o) {
  if (dense.low_rank()) throw error("convert --to: the checkpoint is already low-rank");
  if (o.arch == Arch::dense) throw error("convert --to: expected svd or cola");
  const bool by_energy = o.energy > 0;
  if (by_energy && o.energy > 1) throw error("--energy ", o.energy, " must be in (0, 1]");
  if (!by_energy && (o.attn_rank <= 0 || o.mlp_rank <= 0))
    throw error("convert --to: give --attn-rank and --mlp-rank, or --energy");
  const ParamTable dense_table = build_param_table(dense);

  // Every projection's SVD first: with --energy the ranks depend on all of them.
  struct Item {
    std::string prefix;
    ProjDims dims;
    SvdResult svd;
  };
  std::vector<Item> items;
  LowRankResult out;
  out.config = dense;
  out.config.arch = o.arch;
  out.config.attn_rank = o.attn_rank;
  out.config.mlp_rank = o.mlp_rank;
  int64_t attn_cap = 0, mlp_cap = 0;
  if (by_energy) out.config.attn_rank = out.config.mlp_rank = 0;
  for (int64_t l = 0; l < dense.n_layers; ++l) {
    for (const ProjDims& p : block_projections(dense)) {
      const std::string prefix = projection_prefix(l, p);
      const float* w = weights.view(dense_table.at(prefix + ".weight"));  // [d_out, d_in]
      std::vector<double> wt(p.d_in * p.d_out);
      for (int64_t i = 0; i < p.d_in; ++i)
        for (int64_t j = 0; j < p.d_out; ++j) wt[i * p.d_out + j] = w[j * p.d_in + i];
      items.push_back({prefix, p, svd(wt, p.d_in, p.d_out)});
      ProjectionReport r;
      r.name = prefix;
      const int64_t cap = std::min(p.d_in, p.d_out);
      int64_t& rank = is_attention(p.kind) ? out.config.attn_rank : out.config.mlp_rank;
      int64_t& kind_cap = is_attention(p.kind) ? attn_cap : mlp_cap;
      kind_cap = kind_cap == 0 ? cap : std::min(kind_cap, cap);
      r.chosen_rank = by_energy ? rank_for_energy(items.back().svd.sigma, o.energy) : rank;
      if (by_energy) rank = std::max(rank, r.chosen_rank);
      out.report.push_back(r);
    }
  }
  // One rank per kind cannot exceed the smallest dimension a projection of that kind factorises.
  if (by_energy) {
    out.config.attn_rank = std::min(out.config.attn_rank, attn_cap);
    out.config.mlp_rank = std::min(out.config.mlp_rank, mlp_cap);
  }
  out.config.validate();  // names an explicit rank that exceeds a dimension

  out.table = build_param_table(out.config);
  out.weights = FlatBuffer(out.table.total_elements());
  for (const auto& p : dense_table.entries())  // embedding, norms, head: unchanged
    if (const ParamInfo* q = out.table.find(p.name))
      std::copy_n(weights.view(p), p.numel, out.weights.view(*q));
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    const int64_t rank = is_attention(it.dims.kind) ? out.config.attn_rank : out.config.mlp_rank;
    out.report[i].rank = rank;
    split_factors(it.svd, weights.view(dense_table.at(it.prefix + ".weight")), rank,
                  out.weights.view(out.table.at(it.prefix + ".cola_a")),
                  out.weights.view(out.table.at(it.prefix + ".cola_b")), out.report[i]);
  }
  return out;
}

}  // namespace boostlm
