// This machine's GEMM rate, measured through the kernel interface (so on whatever backend is
// built): what MFU is computed against and what the planner is calibrated with.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace boostlm {

// This rank's GEMM rate in GFLOP/s for C[M, N] = A[M, K] · B[K, N]: the fastest of `reps` calls
// after one warm-up. bf16 operands are rounded beforehand, as training rounds weights and shared
// inputs once rather than at every call. Run on every rank at once, it measures the rate under the
// same sharing of the cores as a multi-rank run.
double measure_gemm_gflops(int64_t M, int64_t N, int64_t K, DType compute, int reps = 5);

// The GEMM peak that model FLOPs utilisation (MFU) is measured against, by the trainer and the
// benchmarks alike: the fastest of six n³ products at each n = 512, 768, 1024, 2048 in turn, up to
// the first n that is not 3% faster than the best before it (no single size is the fastest for
// every precision and core count: oneDNN's large bf16 products run slower than mid-sized ones on
// one core here, and many cores need the large ones). On a shared virtual machine the rate of one
// call varies by up to 2× over tens of seconds; the fastest of many calls is the stable figure.
double measure_peak_gemm_gflops(DType compute);

struct KernelTable;
// The same peak measured with `table`'s gemm on operands in host memory: --device cpu-checked's
// entry, with the CPU backend's table. The checking mode's cost (every kernel opens the checked
// arena) is no part of the machine's rate, and growing with n² against the product's n³ it made
// every size look faster than the one before, so that its MFU peak took 2048³ products in every
// run (issue 63).
double measure_peak_gemm_gflops_on_host(const KernelTable& table, DType compute);

}  // namespace boostlm
