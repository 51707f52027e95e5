#include "kernels/gemm_counters.h"

#include "core/profile.h"

namespace boostlm {

namespace {
GemmCounters g_counters;
bool g_recording = false;
std::vector<GemmShape> g_shapes;
}  // namespace

void count_gemm_call(const GemmShape& shape, int64_t count, double seconds) {
  g_counters.calls += 1;
  g_counters.flops += 2.0 * static_cast<double>(shape.M) * shape.N * shape.K * count;
  g_counters.seconds += seconds;
  Profile::global().add("gemm", seconds);
  if (g_recording)
    for (int64_t b = 0; b < count; ++b) g_shapes.push_back(shape);
}

GemmCounters& gemm_counters() {
  return g_counters;
}
void gemm_record_shapes(bool on) {
  g_recording = on;
}
const std::vector<GemmShape>& gemm_recorded_shapes() {
  return g_shapes;
}
void gemm_clear_recorded_shapes() {
  g_shapes.clear();
}

}  // namespace boostlm
