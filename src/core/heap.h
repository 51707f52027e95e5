// Bytes this process holds through C++ allocation (operator new/delete, which std::vector and
// every container of the engine use): what is live now, and the most that was live at once since
// the last reset. Benchmarks read the high-water mark around a training step to report each
// configuration's peak memory, which the process-wide RSS (monotonic, shared by everything the
// process ever ran) cannot. Allocations made with malloc directly (MPI's and oneDNN's buffers) are
// not counted.
#pragma once

#include <cstdint>

namespace boostlm {

int64_t heap_live_bytes();
int64_t heap_peak_bytes();  // since the last heap_reset_peak() (or the start)
void heap_reset_peak();     // the high-water mark starts again from what is live now

}  // namespace boostlm
