// What the benchmarks share: a clock and medians (the step they time is train/step.h's).
#pragma once

#include <algorithm>
#include <vector>

#include "core/profile.h"

namespace boostlm::bench {

// The learning rate of the timed steps: small, so the weights stay near their initialisation.
inline constexpr float kBenchLr = 1e-4f;

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace boostlm::bench
