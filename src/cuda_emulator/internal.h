// What the emulator's own files share beyond emulator.h: its settings (from the environment), the
// lock every runtime call holds, and the device work that is running now (for fault messages).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

namespace cuda_emulator {

// The order the threads of a block run in between two barriers, and the blocks of a grid.
enum class Order { forward, reverse, shuffle };

struct Settings {
  Order order = Order::forward;  // BOOSTLM_CUDA_EMULATOR_ORDER=forward|reverse|shuffle:SEED
  std::uint64_t seed = 0;
  bool poison = true;            // BOOSTLM_CUDA_EMULATOR_POISON=0|1
  std::string record_path;       // BOOSTLM_CUDA_EMULATOR_RECORD: the launch hash log (record.h)
  int devices = 1;               // BOOSTLM_CUDA_EMULATOR_DEVICES
};
// Read from the environment once; a malformed value is a fault naming the variable.
const Settings& settings();

// The sm_90 (H200-like) limits the emulator enforces.
inline constexpr std::size_t kDefaultSharedBytes = 48 * 1024;  // static + dynamic, by default
inline constexpr std::size_t kOptInSharedBytes = 232448;       // 227 KiB, cudaFuncSetAttribute
inline constexpr std::size_t kDeviceMemoryBytes = std::size_t{140} << 30;

// Every runtime call and every drain of a stream holds this (recursively: a host function may
// call the runtime), so device work of two host threads never overlaps.
std::recursive_mutex& runtime_mutex();

// What device work runs now on this host thread ("kernel rmsnorm_kernel<256> (rmsnorm.cu:43)",
// "cudaMemcpyAsync"), or null when none: the fault handler tells a host access of device memory
// from a device access out of bounds by it.
const char* running_device_work();
void set_running_device_work(const char* what);

// Whether the device work running now on this host thread came from a graph (cudaGraphLaunch):
// the counters tell a graph's launches from the host's.
bool replaying_graph();
void set_replaying_graph(bool on);

// The runtime's per-host-thread last error (cudaGetLastError): `status` if it is an error.
cudaError_t record_error(cudaError_t status);

}  // namespace cuda_emulator
