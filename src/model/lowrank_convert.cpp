#include "model/lowrank_convert.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

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

void parse_rank_list(const std::string& text, LowRankOptions& o) {
  std::set<std::string> seen;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, end - begin);
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      throw error("--rank ", text, ": '", item, "' is not FAMILY=RANK (families: q, k, v, o, ",
                  "gate, up, down; attn and mlp set all of their kind)");
    const std::string family = item.substr(0, eq), value = item.substr(eq + 1);
    if (!seen.insert(family).second) throw error("--rank ", text, ": ", family, " given twice");
    int64_t rank = 0;
    const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), rank);
    if (ec != std::errc() || ptr != value.data() + value.size() || rank <= 0)
      throw error("--rank ", text, ": ", family, "=", value, " is not a positive integer");
    if (family == "attn") {
      o.attn_rank = rank;
    } else if (family == "mlp") {
      o.mlp_rank = rank;
    } else {
      try {
        o.family_ranks[static_cast<int>(parse_proj_kind(family))] = rank;
      } catch (const Error& e) {
        throw error("--rank ", text, ": ", e.what());
      }
    }
    begin = end + 1;
  }
}

namespace {

bool has_explicit_ranks(const LowRankOptions& o) {
  return o.attn_rank > 0 || o.mlp_rank > 0 ||
         std::any_of(o.family_ranks.begin(), o.family_ranks.end(), [](int64_t r) { return r > 0; });
}

// The explicit ranks of every family: its own, else its kind's shorthand capped at its full rank
// (the widest factorisation there is; a shorthand for q 64×64 and k 64×32 gives k rank 32).
std::array<int64_t, kProjectionsPerBlock> explicit_ranks(const ModelConfig& dense,
                                                         const LowRankOptions& o) {
  std::array<int64_t, kProjectionsPerBlock> ranks{};
  for (const ProjDims& p : block_projections(dense)) {
    const int i = static_cast<int>(p.kind);
    const int64_t shorthand = is_attention(p.kind) ? o.attn_rank : o.mlp_rank;
    if (o.family_ranks[i] > 0) {
      ranks[i] = o.family_ranks[i];  // checked against the dimensions by validate()
    } else if (shorthand > 0) {
      ranks[i] = std::min(shorthand, std::min(p.d_in, p.d_out));
    } else {
      throw error("convert --to: no rank for the ", to_string(p.kind), " projections: give ",
                  is_attention(p.kind) ? "--attn-rank" : "--mlp-rank", " or --rank ",
                  to_string(p.kind), "=R, or --energy");
    }
  }
  return ranks;
}

}  // namespace

LowRankResult to_low_rank(const ModelConfig& dense, const FlatBuffer& weights,
                          const LowRankOptions& o) {
  if (dense.low_rank()) throw error("convert --to: the checkpoint is already low-rank");
  if (o.arch == Arch::dense) throw error("convert --to: expected svd or cola");
  const bool by_energy = o.energy > 0;
  if (by_energy && o.energy > 1) throw error("--energy ", o.energy, " must be in (0, 1]");
  if (by_energy && has_explicit_ranks(o))
    throw error("convert --to: give --energy or the ranks (--attn-rank, --mlp-rank, --rank), ",
                "not both");
  std::array<int64_t, kProjectionsPerBlock> ranks{};
  if (!by_energy) ranks = explicit_ranks(dense, o);
  const ParamTable dense_table = build_param_table(dense);

  // Every projection's SVD first: with --energy a family's rank depends on all its layers.
  struct Item {
    std::string prefix;
    ProjDims dims;
    SvdResult svd;
  };
  std::vector<Item> items;
  LowRankResult out;
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
      int64_t& rank = ranks[static_cast<int>(p.kind)];
      // rank_for_energy never exceeds the spectrum's length, min(d_in, d_out).
      r.chosen_rank = by_energy ? rank_for_energy(items.back().svd.sigma, o.energy) : rank;
      if (by_energy) rank = std::max(rank, r.chosen_rank);
      out.report.push_back(r);
    }
  }
  out.config = dense;
  out.config.arch = o.arch;
  out.config.set_ranks(ranks);
  out.config.validate();  // names an explicit family rank that exceeds its dimension

  out.table = build_param_table(out.config);
  out.weights = FlatBuffer(out.table.total_elements());
  for (const auto& p : dense_table.entries())  // embedding, norms, head: unchanged
    if (const ParamInfo* q = out.table.find(p.name))
      std::copy_n(weights.view(p), p.numel, out.weights.view(*q));
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    const int64_t rank = out.config.rank(it.dims.kind);
    out.report[i].rank = rank;
    split_factors(it.svd, weights.view(dense_table.at(it.prefix + ".weight")), rank,
                  out.weights.view(out.table.at(it.prefix + ".cola_a")),
                  out.weights.view(out.table.at(it.prefix + ".cola_b")), out.report[i]);
  }
  return out;
}

}  // namespace boostlm
