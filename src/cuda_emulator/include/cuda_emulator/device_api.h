// What emulated device code calls: the built-in index variables of the running device thread, the
// block and warp barriers, the warp's value exchange (shuffles), shared memory and device faults.
// Implemented by the emulator's executor (executor.cpp); included by the prelude that the
// rewritten .cu files are compiled with, and by the emulator's CUB headers.
#pragma once

#include <cuda_runtime_api.h>
#include <vector_types.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace cuda_emulator::device {

// threadIdx, blockIdx, blockDim, gridDim of the device thread that runs on this host thread now.
// The executor sets them before it resumes a thread's fiber (all fibers of a block share one host
// thread, so one set per host thread is enough). constinit: read without TLS wrapper calls.
struct Builtins {
  uint3 thread_idx{0, 0, 0};
  uint3 block_idx{0, 0, 0};
  dim3 block_dim{1, 1, 1};
  dim3 grid_dim{1, 1, 1};
  unsigned linear_thread = 0;  // x + y·Dx + z·Dx·Dy: the warp is linear_thread / 32
};
extern constinit thread_local Builtins builtins;

inline constexpr int kWarpSize = 32;
// The largest value one lane hands a warp exchange (a shuffle of a CUB reduction's T).
inline constexpr std::size_t kExchangeBytes = 64;

// __syncthreads(): every thread of the block must reach the same call site (file, line).
void sync_block(const char* file, int line);
// __syncwarp(mask): every lane named in `mask` (which names the calling lane) reaches a
// __syncwarp with the same mask.
void sync_warp(unsigned mask, const char* file, int line);

// A warp-wide exchange (the shuffles): each lane in `mask` gives `bytes` bytes of `value` and asks
// for the value of lane `source` (-1: none, `result` keeps its own value); a barrier over the
// lanes of `mask`. A source lane outside `mask` gives poison (0xFF bytes): undefined on a GPU.
void exchange(unsigned mask, const void* value, void* result, std::size_t bytes, int source,
              const char* operation, const char* file, int line);

// A warp-collective instruction whose lanes' results depend on every lane's operands (the tensor
// cores' mma.sync, ldmatrix: kernels/cuda/mma.cuh): all 32 lanes of a full warp (a partial warp
// is a fault: these instructions are .aligned) give `bytes` bytes of `value`; when the last
// arrives, `resolve(given, received)` runs once, on that lane's host thread, with given[l] the
// bytes lane l gave and received[l] the `result_bytes` bytes lane l gets back into `result`.
// Every lane must meet at the same call site (file, line) and operation.
using WarpResolver = void (*)(const unsigned char* const* given, unsigned char* const* received);
void warp_collective(const void* value, std::size_t bytes, void* result, std::size_t result_bytes,
                     WarpResolver resolve, const char* operation, const char* file, int line);

// Counts `flops` executed by tensor-core instructions (the emulated mma.sync) in the running
// kernel: the emulator's counters (cuda_emulator/counters.h) add them to the launch's kernel.
void count_tensor_flops(std::uint64_t flops);

// The block's storage of one static __shared__ declaration (one `slot` per declaration and
// template instantiation): allocated in the block's shared-memory arena on first use in each
// block, poisoned (0xFF) when poisoning is on.
struct SharedSlot {
  std::uint64_t block_serial = 0;
  std::uint32_t offset = 0;
};
void* static_shared(SharedSlot& slot, std::size_t bytes, std::size_t align);
// The launch's dynamic shared memory (extern __shared__), 16-byte aligned, ending at a guard page.
void* dynamic_shared();

// The running device thread, for messages: "kernel K (file:line), block (x,y,z), thread (x,y,z)".
const char* where();
// A fault of the device code itself (a failed contract of the CUDA programming model).
[[noreturn]] void device_fault(const char* what);

template <typename T, typename Key>
T& shared_variable(Key) {
  static_assert(std::is_trivially_default_constructible_v<T>,
                "a __shared__ variable cannot have a constructor (CUDA refuses one)");
  static constinit thread_local SharedSlot slot;
  return *static_cast<T*>(static_shared(slot, sizeof(T), alignof(T)));
}

template <typename T>
T* dynamic_shared_array() {
  return static_cast<T*>(dynamic_shared());
}

// The value a GPU leaves undefined, as the emulator gives it: every byte 0xFF (NaN in fp32, fp64
// and bf16; -1 in integers).
template <typename T>
T poison() {
  static_assert(std::is_trivially_copyable_v<T>);
  T value;
  std::memset(static_cast<void*>(&value), 0xFF, sizeof value);
  return value;
}

// A shuffle of any trivially copyable T (CUB's own ShuffleIndex): lane `source` of the lanes of
// `mask`, or `value` itself for source -1.
template <typename T>
T shuffle_any(unsigned mask, const T& value, int source, const char* operation, const char* file,
              int line) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= kExchangeBytes);
  T result = value;
  exchange(mask, &value, &result, sizeof(T), source, operation, file, line);
  return result;
}

inline unsigned lane_id() {
  return builtins.linear_thread % kWarpSize;
}

}  // namespace cuda_emulator::device
