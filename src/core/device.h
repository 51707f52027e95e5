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
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

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
// What starts the CUDA backend once a GPU is visible (its memory, kernels and collectives; throws
// Error when it cannot); set beside the probe.
using CudaStart = void (*)();
void set_cuda_start(CudaStart start);

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

// ---- The device's memory outside kernels: what a Buffer's own members and the named copies do.
//
// On --device cpu these are host calls on host memory (memset, memcpy), and a named copy uses the
// memory in place. Everywhere else (cpu-checked, a GPU) a named copy stages the values through
// host memory (HostView below), so the checking mode runs the path a GPU takes. A GPU backend
// registers its operations (cudaMemsetAsync and cudaMemcpyAsync on the engine's stream, its pool's
// allocation) with use_device_memory before the first Buffer is allocated.
struct DeviceMemory {
  const char* name = nullptr;
  void* (*allocate)(std::size_t bytes) = nullptr;  // kBufferAlignment-aligned and zeroed
  void (*release)(void* block) = nullptr;
  void (*zero)(void* dst, std::size_t bytes) = nullptr;
  void (*copy)(void* dst, const void* src, std::size_t bytes) = nullptr;  // within the device
  // Between the device and host memory; they return when the host's side may be used.
  void (*download)(void* host, const void* src, std::size_t bytes) = nullptr;
  void (*upload)(void* dst, const void* host, std::size_t bytes) = nullptr;
  // Page-locked host memory, which downloads fill at the link's speed (cudaMallocHost); null:
  // ordinary host memory.
  void* (*host_allocate)(std::size_t bytes) = nullptr;
  void (*host_release)(void* block) = nullptr;
};
// `memory` must outlive its use (a backend's static); null: host memory again (cpu, cpu-checked).
void use_device_memory(const DeviceMemory* memory);
const DeviceMemory* registered_device_memory();

// Whether a named copy may use device memory in place: --device cpu alone.
bool device_memory_in_place();
void device_zero(void* dst, std::size_t bytes);
void device_copy(void* dst, const void* src, std::size_t bytes);
void device_download(void* host, const void* src, std::size_t bytes);
void device_upload(void* dst, const void* host, std::size_t bytes);

// A named copy: `n` elements of device memory as the host sees them, for checkpoint I/O,
// parameter initialisation and metrics. In place on --device cpu (inside a DeviceAccess scope
// held as long as the view); elsewhere a host copy, downloaded when the view is made (read,
// read_write). A view that writes (write, read_write) takes effect on upload(), which a view of
// device memory needs and one in place does without.
// A host buffer that device downloads land in, kept from one use to the next (a checkpoint's
// staging): page-locked where the device offers it, ordinary memory elsewhere; never zeroed.
class StagingBuffer {
 public:
  StagingBuffer() = default;
  ~StagingBuffer();
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;
  // At least `floats` elements; what it held is not kept when it has to grow.
  float* reserve(std::size_t floats);
  float* data() const { return data_; }

 private:
  float* data_ = nullptr;
  std::size_t capacity_ = 0;
  void (*release_)(void*) = nullptr;
};

enum class HostAccess { read, write, read_write };

template <class T>
class HostView {
 public:
  HostView(T* device, std::size_t n, HostAccess access, const char* what)
      : device_(device), n_(n), access_(access), in_place_(device_memory_in_place()) {
    if (in_place_) {
      scope_.emplace(what);
      host_ = device;
      return;
    }
    staged_.resize(n);
    if (access != HostAccess::write) device_download(staged_.data(), device, n * sizeof(T));
    host_ = staged_.data();
  }
  HostView(const HostView&) = delete;
  HostView& operator=(const HostView&) = delete;

  void upload() {
    if (!in_place_ && access_ != HostAccess::read)
      device_upload(const_cast<std::remove_const_t<T>*>(device_), staged_.data(), n_ * sizeof(T));
  }
  T* data() const { return host_; }
  std::size_t size() const { return n_; }
  T& operator[](std::size_t i) const { return host_[i]; }

 private:
  T* device_;
  std::size_t n_;
  HostAccess access_;
  bool in_place_;
  std::optional<DeviceAccess> scope_;
  std::vector<std::remove_const_t<T>> staged_;
  T* host_ = nullptr;
};

// Whether `p` points into the checking mode's arena (device memory under --device cpu-checked).
bool in_checked_arena(const void* p);

// The checking mode's arena (core/buffer.cpp's allocator calls these when it is on).
bool device_memory_checked();
void* checked_allocate(std::size_t bytes);  // page-aligned, zeroed
bool checked_free(void* block);             // false: not from the arena
}  // namespace boostlm

// A kernel's entry: its time under `name` (core/profile.h) and access to device memory.
#define BOOSTLM_KERNEL(name)                                               \
  BOOSTLM_PHASE(name);                                                     \
  const ::boostlm::DeviceAccess BOOSTLM_CONCAT(device_access_, __LINE__) { \
    name                                                                   \
  }
