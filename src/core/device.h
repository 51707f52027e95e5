// Where the engine's arrays live, and the one rule that lets them live on a device: the host
// reaches a buffer's contents only inside a backend call (a kernel, a collective) or a named copy
// (checkpoint save and load, the loss and the gradient norm read once per step, metrics), each of
// which opens a DeviceAccess scope. Everything else in the engine handles pointers without
// dereferencing them, as it must when they point into GPU memory.
//
// `--device cpu-checked` makes the rule testable on machines without a GPU (ggml reads a tensor
// only through ggml_backend_tensor_get; this is the check that nothing else does): every Buffer is
// carved from one arena of pages kept inaccessible (PROT_NONE) except while some DeviceAccess scope
// is open, so a host access anywhere else faults at its line, and the fault handler prints where
// (a backtrace) before aborting. The scopes are counted process-wide (threads too: the TP overlap's
// progress thread runs collectives while the main thread runs kernels), so the check is exact for
// one thread and conservative when several are inside backend calls at once.
#pragma once

#include <cstddef>
#include <string>

#include "core/profile.h"

namespace boostlm {

enum class Device {
  cpu,          // plain host memory (the default)
  cpu_checked,  // host memory reachable only inside backend calls and named copies (tests)
  cuda,         // a GPU (not in this build yet: refused at selection)
};

// "cpu", "cpu-checked", "cuda"; throws Error naming the choices otherwise.
Device parse_device(const std::string& name);
std::string to_string(Device device);

// Chooses the device for the rest of the process, before the first Buffer is allocated. Throws
// Error, before any work, when the device cannot be used here (cuda in a build without CUDA or with
// no GPU visible): the message says why and what to do.
void select_device(Device device);
Device current_device();

// How a build with the CUDA backend counts the GPUs this process sees (0 with the reason in
// *why_none); the command line sets it (cli/device.cpp), as the core links no backend.
using CudaProbe = int (*)(std::string* why_none);
void set_cuda_probe(CudaProbe probe);

// A backend call or a named copy: device memory is reachable while one is open. `what` names it
// for the reader of the call site (the fault handler cannot know which scope was missing). Costs
// one relaxed atomic load when the checking mode is off.
class DeviceAccess {
 public:
  explicit DeviceAccess(const char* what = nullptr);
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;

 private:
  bool counted_;
};

// The checking mode's arena (core/buffer.cpp's allocator calls these when it is on).
bool device_memory_checked();
void* checked_allocate(std::size_t bytes);  // page-aligned, zeroed
bool checked_free(void* block);             // false: not from the arena
}  // namespace boostlm

// A kernel's entry: its time under `name` (core/profile.h) and access to device memory.
#define BOOSTLM_KERNEL(name)                                                       \
  BOOSTLM_PHASE(name);                                                             \
  const ::boostlm::DeviceAccess BOOSTLM_CONCAT(device_access_, __LINE__) { name }
