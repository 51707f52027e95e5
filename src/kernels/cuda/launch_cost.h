// What one kernel launch costs, as its launcher declares it just before the launch (issue 47):
// the bytes it reads and writes in global memory, and the FLOPs of matrix products it runs on the
// tensor cores and on the CUDA cores (element-wise arithmetic is not counted: those kernels are
// priced by their bytes). On the emulated device the declaration goes to the device's counters
// (cuda_emulator/counters.h), which hold a kernel's tensor-core FLOPs to the mma instructions it
// executes and give `boostlm bench step --device cuda` its per-kernel table and roofline; on a GPU
// it compiles to nothing.
//
// Bytes are what the kernel must move at least (each element read or written once), not what a
// cache-less execution would: a tile re-read from L2 is not counted.
#pragma once

#include <cstdint>

#ifdef BOOSTLM_CUDA_EMULATOR
#include "cuda_emulator/counters.h"
#endif

namespace boostlm::cuda {

struct LaunchCost {
  uint64_t bytes_read = 0, bytes_written = 0;
  uint64_t tensor_flops = 0;  // on mma instructions (the emulator checks them)
  uint64_t other_flops = 0;   // matrix-product FLOPs on the CUDA cores
  int dim = 0;                // what the kernel's efficiency depends on (attention: head dim)
  // The counters' name for the launch where its expression does not say (a kernel handed to a
  // generic launcher); null: the expression.
  const char* name = nullptr;
};

inline void declare_launch([[maybe_unused]] const LaunchCost& cost,
                           [[maybe_unused]] const char* file) {
#ifdef BOOSTLM_CUDA_EMULATOR
  cuda_emulator::declare_next_launch(
      {cost.tensor_flops, cost.other_flops, cost.bytes_read, cost.bytes_written, cost.dim, file, cost.name});
#endif
}

// Declares the cost of the launch that follows it in the same file (the emulator refuses a
// declaration taken by a launch elsewhere: a launcher that returned without launching).
#define BOOSTLM_DECLARE_LAUNCH(...) ::boostlm::cuda::declare_launch((__VA_ARGS__), __FILE__)

// Bytes of n elements of T.
template <typename T>
constexpr uint64_t bytes_of(int64_t n) {
  return n > 0 ? static_cast<uint64_t>(n) * sizeof(T) : 0;
}

}  // namespace boostlm::cuda
