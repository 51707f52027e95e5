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
// blocking copy). While it runs, device memory is reachable from the host threads running it (an
// allocation opens at its first access). `what` names the work in the emulator's error messages
// ("cublasLtMatmul", "ncclAllReduce"). shares_memory: the work hands device memory to another
// process or to the kernel (MPI): every allocation is opened before it runs.
void enqueue(cudaStream_t stream, const char* what, std::function<void()> work,
             bool shares_memory = false);

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

}  // namespace cuda_emulator
