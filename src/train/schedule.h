// Learning-rate schedules: linear warm-up, then cosine decay to min_lr or a constant rate.
#pragma once

#include <cstdint>
#include <string>

namespace boostlm {

struct LrSchedule {
  std::string kind = "cosine";  // "cosine" or "constant"
  float max_lr = 1e-3f;
  float min_lr = 1e-4f;      // cosine ends here at total_steps
  int64_t warmup_steps = 0;  // linear from max_lr/warmup to max_lr
  int64_t total_steps = 1;

  void validate() const;  // throws Error
  // Learning rate for optimizer step `step` (0-based).
  float at(int64_t step) const;
};

}  // namespace boostlm
