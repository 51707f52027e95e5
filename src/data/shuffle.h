// Seeded shuffles shared by the loader and corpus preparation.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/rng.h"

namespace boostlm {

// A uniformly random permutation of 0..n-1 (Fisher-Yates), fully determined by the state of `rng`.
inline std::vector<int64_t> shuffled_indices(int64_t n, Rng& rng) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
  return order;
}

}  // namespace boostlm
