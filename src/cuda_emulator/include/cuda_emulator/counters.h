// The emulated device's counters (issue 47): per kernel, how many launches ran and how many FLOPs
// its tensor-core instructions executed (the emulated mma.sync, kernels/cuda/mma.cuh; cuBLASLt's
// matmuls count as one kernel, "cublasLtMatmul", at 2·m·n·k per call). What a profiler of a GPU
// would count, on a machine without one: a kernel whose FLOPs should be on the tensor cores and
// are not shows as zero here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cuda_emulator {

struct KernelCounters {
  std::string kernel;  // the launch's kernel expression as written (templates included)
  std::uint64_t launches = 0;
  std::uint64_t tensor_flops = 0;
  std::uint64_t other_flops = 0;  // what a library call runs off the tensor cores (fp32 GEMMs)
};

// Since the last reset, by kernel in the order each first ran.
std::vector<KernelCounters> kernel_counters();
void reset_kernel_counters();

// The host-side accounting of a finished launch or library call (the executor and cuBLASLt).
void count_launch(const char* kernel, std::uint64_t tensor_flops, std::uint64_t other_flops = 0);

}  // namespace cuda_emulator
