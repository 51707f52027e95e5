// The GPU's GEMM rate, measured through cuda::gemm (kernels/gemm_measure.h's counterpart): what
// MFU on the GPU is computed against (beside the datasheet peak) and what `calibrate --device cuda`
// would write for the planner.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/gemm.h"

namespace boostlm::cuda {

// GFLOP/s of C[M, N] = A[M, K]·B[K, N] (fp32 C; bf16 operands passed with their bf16 copies, as
// training passes weights): the fastest of `reps` calls after one warm-up, each timed with events
// on `stream`. The operands come from the caching allocator and go back to it. Waits for the
// stream (it reads the events).
double measure_gemm_gflops(GemmContext& ctx, int64_t M, int64_t N, int64_t K, DType compute,
                           int reps, cudaStream_t stream);

// The fastest of n³ products at the sizes of kPeakGemmSizes: a GPU reaches its rate only on large
// products (an H100/H200 needs n ≥ 4096 to fill its 132 SMs with 128x256 tiles several times
// over), so the sizes are larger than the CPU's. A device of fewer than kSmallDeviceSMs
// multiprocessors (the emulated device reports the host's cores, and computes on them) is measured
// on kSmallDeviceGemmSizes instead: 16384³ would take minutes there.
inline constexpr int64_t kPeakGemmSizes[] = {2048, 4096, 8192, 16384};
inline constexpr int kSmallDeviceSMs = 16;
inline constexpr int64_t kSmallDeviceGemmSizes[] = {256, 512, 1024};
double measure_peak_gemm_gflops(GemmContext& ctx, DType compute, cudaStream_t stream);

}  // namespace boostlm::cuda
