// TEMPORARY, test-only: a stand-in for the emulated CUDA runtime (src/cuda_emulator/runtime.cpp,
// written by another agent), so that cublaslt.cpp and nccl.cpp can be tested before it exists.
// Delete it once boostlm_cuda_emulator links; the tests then run on the real runtime.
//
// The few runtime calls the tests make, and the seam of emulator.h: device memory is mmap'ed and
// kept PROT_NONE except while stream work runs or a cudaMemcpy copies (so a host access from the
// call itself, not its enqueued work, crashes); stream work runs in order at a synchronisation.
#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "emulator.h"

namespace {

struct Work {
  const char* what;
  std::function<void()> run;
};
std::recursive_mutex g_mutex;
std::map<uintptr_t, std::size_t> g_device, g_pinned;  // start -> bytes
std::map<cudaStream_t, std::deque<Work>> g_streams;
int g_reachable = 0;  // nesting of "device memory is open"

void protect_all(int prot) {
  for (auto& [start, bytes] : g_device) mprotect(reinterpret_cast<void*>(start), bytes, prot);
}
void open_device() {
  if (g_reachable++ == 0) protect_all(PROT_READ | PROT_WRITE);
}
void close_device() {
  if (--g_reachable == 0) protect_all(PROT_NONE);
}

bool inside(const std::map<uintptr_t, std::size_t>& ranges, const void* p, std::size_t bytes) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  auto it = ranges.upper_bound(address);
  if (it == ranges.begin()) return false;
  --it;
  return address + bytes <= it->first + it->second && address >= it->first;
}

void drain(cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  auto& queue = g_streams[stream];
  while (!queue.empty()) {
    Work work = std::move(queue.front());
    queue.pop_front();
    open_device();
    work.run();
    close_device();
  }
}

}  // namespace

namespace cuda_emulator {

void enqueue(cudaStream_t stream, const char* what, std::function<void()> work) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  g_streams[stream].push_back({what, std::move(work)});
}

bool is_device_range(const void* p, std::size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  return inside(g_device, p, bytes);
}

bool is_pinned_host_range(const void* p, std::size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  return inside(g_pinned, p, bytes);
}

void fault(const std::string& message) {
  std::fprintf(stderr, "cuda emulator: %s\n", message.c_str());
  std::abort();
}

}  // namespace cuda_emulator

extern "C" {

cudaError_t cudaMalloc(void** p, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  const std::size_t mapped = bytes ? bytes : 1;
  void* at = mmap(nullptr, mapped, g_reachable ? PROT_READ | PROT_WRITE : PROT_NONE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (at == MAP_FAILED) return cudaErrorMemoryAllocation;
  g_device[reinterpret_cast<uintptr_t>(at)] = mapped;
  *p = at;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (p == nullptr) return cudaSuccess;
  auto it = g_device.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_device.end()) return cudaErrorInvalidValue;
  munmap(p, it->second);
  g_device.erase(it);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** p, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  *p = std::malloc(bytes ? bytes : 1);
  g_pinned[reinterpret_cast<uintptr_t>(*p)] = bytes ? bytes : 1;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* p) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  g_pinned.erase(reinterpret_cast<uintptr_t>(p));
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  static char streams[64];
  static int next = 1;
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  *stream = reinterpret_cast<cudaStream_t>(&streams[next++ % 64]);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  drain(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  drain(stream);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  for (auto& [stream, queue] : g_streams) drain(stream);
  return cudaSuccess;
}

// Blocking: drains every stream first, as the legacy default stream would.
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  cudaDeviceSynchronize();
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  open_device();
  if (bytes) std::memmove(dst, src, bytes);
  close_device();
  return cudaSuccess;
}

const char* cudaGetErrorString(cudaError_t error) {
  return error == cudaSuccess ? "no error" : "stand-in error";
}

}  // extern "C"
