// Helpers shared by the performance-model tests: small models, the cases every layout runs, and
// the engine run the model's counts are held against.
#pragma once

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "core/rng.h"
#include "engine/model.h"
#include "kernels/cross_entropy.h"
#include "kernels/gemm_counters.h"
#include "plan/workload.h"
#include "test_util.h"

namespace boostlm::plan::test {

struct LayoutCase {
  LayoutKind layout;
  Arch arch;
  BlockOptions options;
  int64_t kv_heads = 4;
  RankMix ranks = RankMix::uniform;  // per-projection ranks (issue 31)
};

// Every layout with each switch it accepts.
inline std::vector<LayoutCase> layout_cases() {
  std::vector<LayoutCase> out;
  out.push_back({LayoutKind::dense_tp, Arch::dense, {}});
  out.push_back({LayoutKind::dense_tp, Arch::dense, {true, true, Recompute::block}, 2});
  for (Arch arch : {Arch::cola, Arch::svd}) {
    out.push_back({LayoutKind::naive_tp, arch, {true, true, Recompute::none}});
    out.push_back({LayoutKind::naive_tp, arch, {true, false, Recompute::block}});
    for (bool online : {true, false})
      for (bool grouping : {true, false})
        for (Recompute r : {Recompute::none, Recompute::lowrank, Recompute::block})
          out.push_back({LayoutKind::btp, arch, {online, grouping, r}});
  }
  out.push_back({LayoutKind::btp, Arch::cola, {true, true, Recompute::lowrank}, 2});
  // Every family its own rank: grouped A factors of unequal widths, B factors unbatched.
  out.push_back(
      {LayoutKind::naive_tp, Arch::cola, {true, true, Recompute::none}, 4, RankMix::mixed});
  out.push_back({LayoutKind::btp, Arch::cola, {true, true, Recompute::none}, 2, RankMix::mixed});
  out.push_back({LayoutKind::btp, Arch::svd, {true, false, Recompute::lowrank}, 4, RankMix::odd});
  out.push_back({LayoutKind::btp, Arch::cola, {false, true, Recompute::block}, 4, RankMix::odd});
  // LaX (issue 48): its crossing's GEMMs, collectives (naive-tp) and kept latents.
  out.push_back({LayoutKind::btp, Arch::lax, {true, true, Recompute::none}});
  out.push_back({LayoutKind::btp, Arch::lax, {false, false, Recompute::lowrank}, 2, RankMix::odd});
  out.push_back({LayoutKind::naive_tp, Arch::lax, {true, true, Recompute::none}});
  out.push_back({LayoutKind::btp, Arch::lax, {true, true, Recompute::block}});
  out.push_back({LayoutKind::naive_tp, Arch::lax, {true, true, Recompute::block}, 2});
  out.push_back(
      {LayoutKind::naive_tp, Arch::lax, {true, false, Recompute::none}, 4, RankMix::mixed});
  return out;
}

inline std::string case_name(const LayoutCase& c) {
  return to_string(c.layout) + "/" + to_string(c.arch) +
         (c.options.online_norm ? "/online" : "/sync") +
         (c.options.grouping ? "/grouped" : "/ungrouped") + "/recompute-" +
         to_string(c.options.recompute) + "/kv" + std::to_string(c.kv_heads) + to_string(c.ranks);
}

// A micro-batch as the engine of the active backend runs it (its LM-head chunks included), for
// the tests that hold the planner to the engine's own counts.
inline MicroBatchShape micro_batch(const LayoutCase& c, int64_t B, int64_t T, int tp) {
  const ModelConfig model = small_model(c.arch, c.kv_heads, 3);
  return {c.layout,
          c.arch == Arch::dense ? model : with_ranks(model, c.ranks),
          c.options,
          B,
          T,
          tp,
          logits_chunk_elements()};
}

// Sorted (M, N, K) of GEMMs, so two lists compare as multisets.
inline std::vector<std::tuple<int64_t, int64_t, int64_t>> sorted_shapes(
    const std::vector<GemmWork>& gemms) {
  std::vector<std::tuple<int64_t, int64_t, int64_t>> out;
  for (const auto& g : gemms) out.emplace_back(g.m, g.n, g.k);
  std::sort(out.begin(), out.end());
  return out;
}

inline std::vector<std::tuple<int64_t, int64_t, int64_t>> sorted_shapes(
    const std::vector<GemmShape>& gemms) {
  std::vector<std::tuple<int64_t, int64_t, int64_t>> out;
  for (const auto& g : gemms) out.emplace_back(g.M, g.N, g.K);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace boostlm::plan::test
