#include "kernels/gemm_counters.h"

#include <algorithm>

#include "core/profile.h"

namespace boostlm {

namespace {
GemmCounters g_counters;
bool g_recording = false;
std::vector<GemmShape> g_shapes;
std::vector<GemmShapeTime> g_shape_times;
}  // namespace

namespace {
void (*g_collector)() = nullptr;
bool g_collecting = false;

void collect_late_times() {
  if (!g_collector || g_collecting) return;
  g_collecting = true;
  g_collector();
  g_collecting = false;
}

GemmShapeTime* shape_time(const GemmShape& shape) {
  auto it = std::find_if(g_shape_times.begin(), g_shape_times.end(),
                         [&](const GemmShapeTime& t) { return t.shape == shape; });
  if (it == g_shape_times.end()) it = g_shape_times.insert(it, GemmShapeTime{shape});
  return &*it;
}
}  // namespace

void count_gemm_call(const GemmShape& shape, int64_t count, double seconds) {
  const double flops = 2.0 * static_cast<double>(shape.M) * shape.N * shape.K * count;
  g_counters.calls += 1;
  g_counters.flops += flops;
  g_counters.seconds += seconds;
  Profile::global().add("gemm", seconds);
  if (!g_recording) return;
  for (int64_t b = 0; b < count; ++b) g_shapes.push_back(shape);
  GemmShapeTime* t = shape_time(shape);
  t->calls += count;
  t->flops += flops;
  t->seconds += seconds;
}

void add_gemm_seconds(const GemmShape& shape, int64_t count, double seconds) {
  g_counters.seconds += seconds;
  Profile::global().add("gemm", seconds);
  if (g_recording && count > 0) shape_time(shape)->seconds += seconds;
}

void set_gemm_time_collector(void (*collect)()) {
  g_collector = collect;
}

GemmCounters& gemm_counters() {
  collect_late_times();
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
  g_shape_times.clear();
}
std::vector<GemmShapeTime> gemm_recorded_shape_times() {
  collect_late_times();
  return g_shape_times;
}

}  // namespace boostlm
