#include "plan/enumerate.h"

#include <algorithm>

#include "core/error.h"

namespace boostlm::plan {

namespace {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) out.push_back(i);
  return out;
}

bool runs(const StepConfig& c) {
  try {
    check_step_config(c);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// The micro-batch sizes that split this DP rank's share of the batch evenly.
std::vector<int64_t> micro_batch_sizes(const SearchSpace& s, int64_t per_rank) {
  std::vector<int64_t> out;
  const std::vector<int64_t> sizes =
      s.micro_batch ? std::vector<int64_t>{s.micro_batch} : s.micro_batch_sizes;
  for (int64_t b : sizes)
    if (b <= per_rank && per_rank % b == 0) out.push_back(b);
  return out;
}

void add_grid(const Hardware& hw, const SearchSpace& s, StepConfig base,
              std::vector<Candidate>& out) {
  if (base.dp < 1 || s.global_batch % base.dp != 0) return;
  const int64_t per_rank = s.global_batch / base.dp;
  for (int64_t b : micro_batch_sizes(s, per_rank)) {
    for (Recompute r : s.recompute) {
      for (bool zero : {false, true}) {
        if (zero && (!s.try_zero1 || base.dp < 2)) continue;
        StepConfig c = base;
        c.micro_batch = b;
        c.micro_batches = per_rank / b;
        c.options.recompute = r;
        c.options.overlap_chunks = s.overlap_chunks;
        c.zero1 = zero;
        if (!runs(c)) continue;
        out.push_back({c, predict_step(hw, c)});
      }
    }
  }
}

}  // namespace

std::vector<Candidate> enumerate_plans(const Hardware& hw, const SearchSpace& s) {
  if (s.gpus < 1) throw error("plan: --gpus must be at least 1");
  if (s.global_batch < 1) throw error("plan: --global-batch must be at least 1");
  std::vector<Candidate> out;
  for (LayoutKind layout : s.layouts) {
    for (int tp : divisors(s.gpus)) {
      if (s.tp && tp != s.tp) continue;
      for (int pp : divisors(s.gpus / tp)) {
        if (s.pp && pp != s.pp) continue;
        StepConfig base;
        base.layout = layout;
        base.config = layout_traits(layout).low_rank ? s.config : s.dense_config;
        base.tp = tp;
        base.pp = pp;
        base.dp = s.gpus / (tp * pp);
        base.seq_len = s.seq_len;
        base.precision = s.precision;
        add_grid(hw, s, base, out);
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    return a.prediction.step_s < b.prediction.step_s;
  });
  return out;
}

}  // namespace boostlm::plan
