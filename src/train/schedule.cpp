#include "train/schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace boostlm {

void LrSchedule::validate() const {
  if (kind != "cosine" && kind != "constant")
    throw error("--schedule: unknown schedule '", kind, "' (expected cosine or constant)");
  if (!(max_lr > 0.0f) || !std::isfinite(max_lr))
    throw error("--lr ", max_lr, " is out of range: a finite number above 0");
  if (!(min_lr >= 0.0f && min_lr <= max_lr))
    throw error("--min-lr ", min_lr, " is out of range: [0, --lr] = [0, ", max_lr, "]");
  if (warmup_steps < 0) throw error("--warmup must not be negative");
}

float LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) return max_lr * static_cast<float>(step + 1) / warmup_steps;
  if (kind == "constant") return max_lr;
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / decay_steps);
  return min_lr + static_cast<float>(0.5 * (1.0 + std::cos(M_PI * progress))) * (max_lr - min_lr);
}

}  // namespace boostlm
