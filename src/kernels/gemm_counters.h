// What the GEMMs of the process did: calls, FLOPs and time, so that benchmarks can report the
// share of time in GEMM and tests can check FLOP formulas, and, while recording, the shape of every
// GEMM, so that the same shapes can be replayed in isolation. Backend-neutral: a backend's gemm
// reports each call through count_gemm_call.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "kernels/gemm.h"

namespace boostlm {

struct GemmShape {
  Trans trans_a, trans_b;
  int64_t M, N, K;
  float beta;
  DType compute;
  bool operator==(const GemmShape&) const = default;
};

struct GemmCounters {
  int64_t calls = 0;  // a batched call counts once
  double flops = 0;
  double seconds = 0;
};

// Process-wide counters (not thread-safe: GEMM is called from the main thread; the backend
// threads it).
GemmCounters& gemm_counters();
void gemm_record_shapes(bool on);  // start/stop recording the shape of every GEMM (batch member)
const std::vector<GemmShape>& gemm_recorded_shapes();
void gemm_clear_recorded_shapes();

// While recording, the time of each distinct shape too: calls (batch members), FLOPs and seconds
// (a batched call's time shared equally by its members), in the order each shape first ran.
struct GemmShapeTime {
  GemmShape shape;
  int64_t calls = 0;
  double flops = 0, seconds = 0;
};
std::vector<GemmShapeTime> gemm_recorded_shape_times();

// For a backend's gemm: one call of `count` GEMMs of `shape` (a batch of `count` members), which
// took `seconds`. Adds it to the counters and the profile's "gemm" phase, and records `count`
// shapes while recording.
void count_gemm_call(const GemmShape& shape, int64_t count, double seconds);
// For a backend whose GEMM times arrive after the call (a GPU's, measured with events): the call
// is counted at once with count_gemm_call(shape, count, 0), and its seconds added later here (to
// the counters, the profile's "gemm" phase and the shape's time while recording).
void add_gemm_seconds(const GemmShape& shape, int64_t count, double seconds);
// What books such late times (the backend's event collection; it waits for the GEMMs timed so
// far): gemm_counters() and gemm_recorded_shape_times() run it first. nullptr: none.
void set_gemm_time_collector(void (*collect)());

}  // namespace boostlm
