// The emulated CUDA device's internal seam: what its runtime (runtime.cpp: memory, streams,
// events, kernel launches), its cuBLASLt (cublaslt.cpp) and its NCCL (nccl.cpp) share. Nothing
// outside src/cuda_emulator includes this; the backend sees only the real toolkit's headers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

namespace cuda_emulator {

// Enqueues `work` on `stream` (0: the legacy default stream). It never runs at the enqueue: it
// runs later, in stream order, when the stream is drained (a synchronisation, an event wait, a
// blocking copy). While it runs, device memory is reachable from the host thread running it.
// `what` names the work in the emulator's error messages ("cublasLtMatmul", "ncclAllReduce").
void enqueue(cudaStream_t stream, const char* what, std::function<void()> work);

// True when [p, p + bytes) lies inside one live device allocation (cudaMalloc).
bool is_device_range(const void* p, std::size_t bytes);
// True when [p, p + bytes) lies inside one live pinned host allocation (cudaMallocHost).
bool is_pinned_host_range(const void* p, std::size_t bytes);

// A fault of the emulated device that a GPU would also hit or leave undefined (a race, a barrier
// not reached by every thread, an out-of-bounds access, a host pointer given to a device call):
// prints "cuda emulator: <message>" to stderr and aborts the process.
[[noreturn]] void fault(const std::string& message);

// The order the threads of each block (and the blocks of each grid) run in from now on, spelt as
// BOOSTLM_CUDA_EMULATOR_ORDER spells it: "forward", "reverse" or "shuffle:SEED" (the emulator's
// own tests run one kernel in two orders in one process).
void set_order(const std::string& order);

// bf16 as the device stores it: fp32 rounded to nearest, ties to even, a NaN staying a (quiet)
// NaN (cuBLASLt's bf16 epilogue, NCCL's bf16 reductions); widened back exactly.
inline uint16_t float_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace cuda_emulator
