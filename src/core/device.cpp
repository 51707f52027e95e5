#include "core/device.h"

#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

#include "core/error.h"

namespace boostlm {
namespace {

std::atomic<Device> g_device{Device::cpu};
std::atomic<bool> g_checked{false};

// The checking mode's arena: one reservation of address space (nothing is committed until a page
// is written), handed out first-fit in whole pages, so that one mprotect covers every buffer.
constexpr std::size_t kArenaBytes = std::size_t{1} << 36;  // 64 GiB of address space
struct Arena {
  std::mutex mutex;
  char* base = nullptr;
  std::size_t high_water = 0;               // bytes ever handed out from base
  std::map<std::size_t, std::size_t> free;  // offset -> bytes, coalesced
  std::map<std::size_t, std::size_t> used;  // offset -> bytes
  int open = 0;                             // DeviceAccess scopes open, all threads
};
Arena& arena() {
  static Arena a;
  return a;
}
std::size_t page_bytes() {
  static const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

void protect(Arena& a, std::size_t offset, std::size_t bytes, bool reachable) {
  if (bytes == 0) return;
  if (mprotect(a.base + offset, bytes, reachable ? PROT_READ | PROT_WRITE : PROT_NONE) != 0)
    std::fprintf(stderr, "boostlm: mprotect of the checked arena failed: %s\n",
                 std::strerror(errno));
}

// A fault inside the arena is a host access outside any backend call or named copy: say so, with
// a backtrace (async-signal-safe calls only), and end the process as the fault would have.
struct sigaction g_previous_segv {};
extern "C" void on_segv(int sig, siginfo_t* info, void* context) {
  Arena& a = arena();
  const char* address = static_cast<const char*>(info->si_addr);
  if (a.base != nullptr && address >= a.base && address < a.base + kArenaBytes) {
    static const char kMessage[] =
        "\nboostlm: --device cpu-checked: the host touched device memory outside a backend call "
        "or a named copy (core/device.h); where:\n";
    (void)!write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
    void* frames[48];
    const int n = backtrace(frames, static_cast<int>(std::size(frames)));
    backtrace_symbols_fd(frames, n, STDERR_FILENO);
  }
  sigaction(SIGSEGV, &g_previous_segv, nullptr);  // the usual end (core dump, exit status)
  (void)context;
  raise(sig);
}

void start_checking() {
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mutex);
  if (a.base != nullptr) return;
  void* p =
      mmap(nullptr, kArenaBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    throw error("--device cpu-checked: cannot reserve ", kArenaBytes >> 30,
                " GiB of address space for the checked arena: ", std::strerror(errno));
  a.base = static_cast<char*>(p);
  struct sigaction action {};
  action.sa_sigaction = on_segv;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &g_previous_segv);
  g_checked.store(true);
}

CudaProbe g_cuda_probe = nullptr;
CudaStart g_cuda_start = nullptr;

void start_cuda() {
  if (g_cuda_probe == nullptr)
    throw error(
        "--device cuda: this build of boostlm has no CUDA backend (it was configured without the "
        "CUDA toolkit, or with -DBOOSTLM_CUDA=OFF); rebuild with /usr/local/cuda present, or use "
        "--device cpu");
  std::string why;
  const int gpus = g_cuda_probe(&why);
  if (gpus == 0) throw error("--device cuda: no GPU is visible to this process: ", why);
  if (g_cuda_start == nullptr)
    throw error("--device cuda: ", gpus, " GPU(s) visible but this command cannot start the "
                "CUDA backend; use --device cpu");
  g_cuda_start();
}

}  // namespace

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::cpu;
  if (name == "cpu-checked") return Device::cpu_checked;
  if (name == "cuda") return Device::cuda;
  throw error("--device ", name, ": choose cpu, cpu-checked or cuda");
}

std::string to_string(Device device) {
  switch (device) {
    case Device::cpu:
      return "cpu";
    case Device::cpu_checked:
      return "cpu-checked";
    case Device::cuda:
      return "cuda";
  }
  return "?";
}

void set_cuda_probe(CudaProbe probe) {
  g_cuda_probe = probe;
}

void set_cuda_start(CudaStart start) { g_cuda_start = start; }

void select_device(Device device) {
  if (device == Device::cuda) start_cuda();
  if (device == Device::cpu_checked) start_checking();
  g_device.store(device);
}

Device current_device() {
  return g_device.load();
}

bool device_memory_checked() {
  return g_checked.load(std::memory_order_relaxed);
}

DeviceAccess::DeviceAccess(const char*) : counted_(device_memory_checked()) {
  if (!counted_) return;
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mutex);
  if (a.open++ == 0) protect(a, 0, a.high_water, true);
}

DeviceAccess::~DeviceAccess() {
  if (!counted_) return;
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mutex);
  if (--a.open == 0) protect(a, 0, a.high_water, false);
}

bool in_checked_arena(const void* p) {
  const char* c = static_cast<const char*>(p);
  const Arena& a = arena();
  return a.base != nullptr && c >= a.base && c < a.base + kArenaBytes;
}

void* checked_allocate(std::size_t bytes) {
  Arena& a = arena();
  const std::size_t page = page_bytes();
  bytes = (std::max<std::size_t>(bytes, 1) + page - 1) / page * page;
  std::lock_guard<std::mutex> lock(a.mutex);
  std::size_t offset = a.high_water;
  bool reused = false;
  for (auto it = a.free.begin(); it != a.free.end(); ++it) {
    if (it->second < bytes) continue;
    offset = it->first;
    if (it->second > bytes) a.free[offset + bytes] = it->second - bytes;
    a.free.erase(it);
    reused = true;
    break;
  }
  if (!reused) {
    if (a.high_water + bytes > kArenaBytes)
      throw error("out of memory: the checked arena (--device cpu-checked) holds ",
                  kArenaBytes >> 30, " GiB");
    a.high_water += bytes;
  }
  a.used[offset] = bytes;
  // Zeroed as a Buffer promises: fresh pages are, and freed ones were given back (checked_free).
  protect(a, offset, bytes, a.open > 0);
  return a.base + offset;
}

bool checked_free(void* block) {
  Arena& a = arena();
  char* p = static_cast<char*>(block);
  if (a.base == nullptr || p < a.base || p >= a.base + kArenaBytes) return false;
  std::lock_guard<std::mutex> lock(a.mutex);
  auto it = a.used.find(static_cast<std::size_t>(p - a.base));
  if (it == a.used.end()) {
    std::fprintf(stderr, "boostlm: freeing %p, not a block of the checked arena\n", block);
    std::abort();
  }
  std::size_t offset = it->first, bytes = it->second;
  a.used.erase(it);
  madvise(a.base + offset, bytes, MADV_DONTNEED);  // the memory goes back; the range stays ours
  auto next = a.free.lower_bound(offset);
  if (next != a.free.end() && next->first == offset + bytes) {
    bytes += next->second;
    next = a.free.erase(next);
  }
  if (next != a.free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      bytes += prev->second;
      a.free.erase(prev);
    }
  }
  a.free[offset] = bytes;
  return true;
}

}  // namespace boostlm

namespace boostlm {

namespace {
const DeviceMemory* g_memory = nullptr;
}  // namespace

void use_device_memory(const DeviceMemory* memory) {
  g_memory = memory;
}
const DeviceMemory* registered_device_memory() {
  return g_memory;
}

StagingBuffer::~StagingBuffer() {
  if (data_) release_(data_);
}

float* StagingBuffer::reserve(std::size_t floats) {
  if (floats <= capacity_ && data_) return data_;
  if (data_) release_(data_);
  data_ = nullptr;
  capacity_ = 0;
  const std::size_t bytes = std::max<std::size_t>(floats, 1) * sizeof(float);
  if (g_memory && g_memory->host_allocate) {
    data_ = static_cast<float*>(g_memory->host_allocate(bytes));
    release_ = g_memory->host_release;
  } else {
    data_ = static_cast<float*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
    release_ = std::free;
  }
  if (!data_) throw error("cannot allocate ", bytes, " bytes of host memory for a staging buffer");
  // Touched now: a page's first touch can cost far more than the copy into it (35 MB/s in this
  // project's VMs), and a save should pay only for the copy.
  std::memset(data_, 0, bytes);
  capacity_ = floats;
  return data_;
}

bool device_memory_in_place() {
  return g_memory == nullptr && !device_memory_checked();
}

void device_zero(void* dst, std::size_t bytes) {
  if (bytes == 0) return;
  if (g_memory) return g_memory->zero(dst, bytes);
  const DeviceAccess access("device_zero");
  std::memset(dst, 0, bytes);
}

void device_copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  if (g_memory) return g_memory->copy(dst, src, bytes);
  const DeviceAccess access("device_copy");
  std::memmove(dst, src, bytes);
}

void device_download(void* host, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  if (g_memory) return g_memory->download(host, src, bytes);
  const DeviceAccess access("device_download");
  std::memcpy(host, src, bytes);
}

void device_upload(void* dst, const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  if (g_memory) return g_memory->upload(dst, host, bytes);
  const DeviceAccess access("device_upload");
  std::memcpy(dst, host, bytes);
}

}  // namespace boostlm
