// The CUDA runtime API of the emulated device: memory, copies, streams, events, launches and
// errors, implemented against the real toolkit's declarations (cuda_runtime_api.h), so the
// signatures are CUDA's own. Every call holds the runtime lock; what it enqueues runs when a
// stream is drained (streams.h), never at the call.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_emulator/emulator.h"
#include "cuda_emulator/executor.h"
#include "cuda_emulator/internal.h"
#include "cuda_emulator/launch.h"
#include "cuda_emulator/memory.h"
#include "cuda_emulator/record.h"
#include "cuda_emulator/streams.h"

// The opaque handle types of driver_types.h, defined by the emulator.
struct CUevent_st {
  unsigned flags = 0;
  cuda_emulator::streams::Ticket recorded;  // the latest record (no stream: never recorded)
  std::uint64_t generation = 0;             // which record the time belongs to
  std::uint64_t timed_generation = 0;
  double time_ms = 0;
  // Last recorded in a capture: where (the waits join it); the event cannot be queried, waited
  // for on the host or timed until it is recorded outside one.
  std::shared_ptr<cuda_emulator::streams::CaptureMark> captured;
};

// A graph from a capture (its nodes in capture order, which is an order of its dependencies),
// and an instantiated one. A node handle (cudaGraphGetNodes) is only an identity.
struct CUgraphNode_st {};
struct CUgraph_st {
  std::vector<cuda_emulator::streams::Node> nodes;
  std::vector<std::unique_ptr<CUgraphNode_st>> handles;  // cudaGraphGetNodes'
};
struct CUgraphExec_st {
  std::vector<cuda_emulator::streams::Node> nodes;
};

namespace cuda_emulator {

namespace {

using Lock = std::lock_guard<std::recursive_mutex>;

thread_local cudaError_t g_last_error = cudaSuccess;
thread_local const char* g_running_work = nullptr;
thread_local bool g_replaying_graph = false;

// Events are handles to objects that markers still pending on a stream keep alive.
std::unordered_map<cudaEvent_t, std::shared_ptr<CUevent_st>>& events() {
  static auto* table = new std::unordered_map<cudaEvent_t, std::shared_ptr<CUevent_st>>();
  return *table;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Every entry point: the handlers installed, the lock held.
struct Entry {
  Entry() : lock(runtime_mutex()) { memory::install_fault_handlers(); }
  Lock lock;
};

cudaError_t fail(cudaError_t status) {
  return record_error(status);
}

std::uint64_t parse_seed(const std::string& text) {
  char* end = nullptr;
  const unsigned long long seed = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0')
    fault("BOOSTLM_CUDA_EMULATOR_ORDER=shuffle:" + text + ": the seed must be a decimal integer");
  return seed;
}

void parse_order(const std::string& text, Settings& s) {
  if (text == "forward") {
    s.order = Order::forward;
  } else if (text == "reverse") {
    s.order = Order::reverse;
  } else if (text.rfind("shuffle:", 0) == 0) {
    s.order = Order::shuffle;
    s.seed = parse_seed(text.substr(8));
  } else {
    fault("BOOSTLM_CUDA_EMULATOR_ORDER=" + text + ": expected forward, reverse or shuffle:SEED");
  }
}

Settings read_settings() {
  Settings s;
  if (const char* order = std::getenv("BOOSTLM_CUDA_EMULATOR_ORDER"); order && *order)
    parse_order(order, s);
  if (const char* poison = std::getenv("BOOSTLM_CUDA_EMULATOR_POISON"); poison && *poison) {
    const std::string text = poison;
    if (text != "0" && text != "1")
      fault("BOOSTLM_CUDA_EMULATOR_POISON=" + text + ": expected 0 or 1");
    s.poison = text == "1";
  }
  if (const char* record = std::getenv("BOOSTLM_CUDA_EMULATOR_RECORD")) s.record_path = record;
  if (const char* devices = std::getenv("BOOSTLM_CUDA_EMULATOR_DEVICES"); devices && *devices) {
    char* end = nullptr;
    const long n = std::strtol(devices, &end, 10);
    if (*end != '\0' || n < 0 || n > 64)
      fault(std::string("BOOSTLM_CUDA_EMULATOR_DEVICES=") + devices +
            ": expected a device count from 0 to 64");
    s.devices = static_cast<int>(n);
  }
  return s;
}

// The copy's pointers against its kind, as CUDA checks them: each side must be the memory the
// kind names (device: inside one live allocation; host: outside device memory), else
// cudaErrorInvalidValue. cudaMemcpyDefault infers the kind from the pointers.
cudaError_t resolve_kind(void* dst, const void* src, std::size_t count, cudaMemcpyKind& kind) {
  const bool dst_device = memory::in_device_region(dst);
  const bool src_device = memory::in_device_region(src);
  if (kind == cudaMemcpyDefault)
    kind = dst_device ? (src_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                      : (src_device ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  const bool want_dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool want_src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind != cudaMemcpyHostToHost && kind != cudaMemcpyHostToDevice &&
      kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice)
    return cudaErrorInvalidMemcpyDirection;
  if (dst_device != want_dst_device || src_device != want_src_device) return cudaErrorInvalidValue;
  if (dst_device && !memory::is_device_range(dst, count)) return cudaErrorInvalidValue;
  if (src_device && !memory::is_device_range(src, count)) return cudaErrorInvalidValue;
  return cudaSuccess;
}

// The counters' row of a copy or a fill (counters.h): the device bytes it reads and writes.
KernelCounters transfer_row(const char* name, std::size_t read, std::size_t written) {
  KernelCounters row;
  row.kernel = name;
  row.launches = 1;
  row.bytes_read = read;
  row.bytes_written = written;
  return row;
}

const char* copy_name(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToDevice:
      return "cudaMemcpy host to device";
    case cudaMemcpyDeviceToHost:
      return "cudaMemcpy device to host";
    case cudaMemcpyDeviceToDevice:
      return "cudaMemcpy device to device";
    default:
      return "cudaMemcpy host to host";
  }
}

// Device bytes a copy of `bytes` reads and writes by its kind.
KernelCounters copy_row(cudaMemcpyKind kind, std::size_t bytes) {
  const bool from_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  const bool to_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  return transfer_row(copy_name(kind), from_device ? bytes : 0, to_device ? bytes : 0);
}

// What capture refuses of a copy or a fill: a synchronous one while a capture prohibits this
// thread's unsafe calls; on a capturing stream, host memory that is not pinned (the graph's copy
// node would read or write the address at each replay: pageable memory is refused rather than
// baked in, the emulator's rule); any enqueue into an invalidated capture.
cudaError_t capture_checks(const std::shared_ptr<streams::Stream>& stream, bool blocking,
                           cudaMemcpyKind kind, void* dst, const void* src, std::size_t count) {
  if (blocking)
    if (const cudaError_t status = streams::check_unsafe_call(); status != cudaSuccess)
      return status;
  if (const cudaError_t status = streams::check_enqueue(stream); status != cudaSuccess)
    return status;
  if (!streams::capturing(stream)) return cudaSuccess;
  if ((kind == cudaMemcpyHostToDevice && !memory::is_pinned_range(src, count)) ||
      (kind == cudaMemcpyDeviceToHost && !memory::is_pinned_range(dst, count)) ||
      kind == cudaMemcpyHostToHost)
    return streams::invalidate(stream, cudaErrorStreamCaptureUnsupported);
  return cudaSuccess;
}

// A copy enqueued on `stream` (blocking: drained before returning, as cudaMemcpy is).
cudaError_t copy(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind,
                 cudaStream_t handle, bool blocking) {
  std::shared_ptr<streams::Stream> stream = streams::find(handle);
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  if (count == 0) return cudaSuccess;
  if (!dst || !src) return fail(cudaErrorInvalidValue);
  if (const cudaError_t status = resolve_kind(dst, src, count, kind); status != cudaSuccess)
    return fail(status);
  if (const cudaError_t status = capture_checks(stream, blocking, kind, dst, src, count);
      status != cudaSuccess)
    return fail(status);
  std::function<void()> work;
  if (count_only()) {
    work = [] {};  // counted, not run (counters.h)
  } else if (kind == cudaMemcpyHostToDevice && !memory::is_pinned_range(src, count)) {
    // From pageable memory CUDA stages the source at the call: the caller may reuse it at once.
    auto staged = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + count);
    work = [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); };
  } else {
    // The host reads this until the stream is synchronised (a captured copy does nothing now).
    if (kind == cudaMemcpyDeviceToHost && settings().poison && !blocking &&
        !streams::capturing(stream))
      std::memset(dst, 0xFF, count);
    work = [dst, src, count] { std::memmove(dst, src, count); };
  }
  work = [work = std::move(work), row = copy_row(kind, count)] {
    work();
    count_library_call(row);
  };
  const streams::Ticket ticket = streams::enqueue(
      stream, blocking ? "cudaMemcpy" : "cudaMemcpyAsync", streams::Kind::device, std::move(work));
  if (blocking) streams::drain(ticket);
  return cudaSuccess;
}

// A copy of `height` rows of `width` bytes between pitched memory: each side's whole extent must
// be the memory its kind names, as for a flat copy.
cudaError_t copy_2d(void* dst, std::size_t dpitch, const void* src, std::size_t spitch,
                    std::size_t width, std::size_t height, cudaMemcpyKind kind, cudaStream_t handle,
                    bool blocking) {
  std::shared_ptr<streams::Stream> stream = streams::find(handle);
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  if (width == 0 || height == 0) return cudaSuccess;
  if (!dst || !src || width > dpitch || width > spitch) return fail(cudaErrorInvalidValue);
  const std::size_t dst_extent = dpitch * (height - 1) + width;
  const std::size_t src_extent = spitch * (height - 1) + width;
  cudaMemcpyKind dst_kind = kind, src_kind = kind;
  if (const cudaError_t status = resolve_kind(dst, src, std::min(dst_extent, src_extent), dst_kind);
      status != cudaSuccess)
    return fail(status);
  src_kind = dst_kind;
  if (memory::in_device_region(dst) && !memory::is_device_range(dst, dst_extent))
    return fail(cudaErrorInvalidValue);
  if (memory::in_device_region(src) && !memory::is_device_range(src, src_extent))
    return fail(cudaErrorInvalidValue);
  if (const cudaError_t status =
          capture_checks(stream, blocking, src_kind, dst, src, std::max(dst_extent, src_extent));
      status != cudaSuccess)
    return fail(status);
  std::function<void()> work;
  if (count_only()) {
    work = [] {};  // counted, not run (counters.h)
  } else if (src_kind == cudaMemcpyHostToDevice && !memory::is_pinned_range(src, src_extent)) {
    auto staged = std::make_shared<std::vector<unsigned char>>(width * height);
    for (std::size_t r = 0; r < height; ++r)
      std::memcpy(staged->data() + r * width, static_cast<const char*>(src) + r * spitch, width);
    work = [dst, dpitch, width, height, staged] {
      for (std::size_t r = 0; r < height; ++r)
        std::memcpy(static_cast<char*>(dst) + r * dpitch, staged->data() + r * width, width);
    };
  } else {
    if (src_kind == cudaMemcpyDeviceToHost && settings().poison && !blocking &&
        !streams::capturing(stream))
      for (std::size_t r = 0; r < height; ++r)
        std::memset(static_cast<char*>(dst) + r * dpitch, 0xFF, width);
    work = [dst, dpitch, src, spitch, width, height] {
      for (std::size_t r = 0; r < height; ++r)
        std::memmove(static_cast<char*>(dst) + r * dpitch,
                     static_cast<const char*>(src) + r * spitch, width);
    };
  }
  work = [work = std::move(work), row = copy_row(src_kind, width * height)] {
    work();
    count_library_call(row);
  };
  const streams::Ticket ticket =
      streams::enqueue(stream, blocking ? "cudaMemcpy2D" : "cudaMemcpy2DAsync",
                       streams::Kind::device, std::move(work));
  if (blocking) streams::drain(ticket);
  return cudaSuccess;
}

cudaError_t set(void* dst, int value, std::size_t count, cudaStream_t handle, bool blocking) {
  std::shared_ptr<streams::Stream> stream = streams::find(handle);
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  if (count == 0) return cudaSuccess;
  if (!memory::is_device_range(dst, count)) return fail(cudaErrorInvalidValue);
  if (const cudaError_t status =
          capture_checks(stream, blocking, cudaMemcpyDeviceToDevice, dst, dst, count);
      status != cudaSuccess)
    return fail(status);
  const streams::Ticket ticket =
      streams::enqueue(stream, blocking ? "cudaMemset" : "cudaMemsetAsync", streams::Kind::device,
                       [dst, value, count] {
                         if (!count_only()) std::memset(dst, value, count);
                         count_library_call(transfer_row("cudaMemset", 0, count));
                       });
  if (blocking) streams::drain(ticket);
  return cudaSuccess;
}

// Live graphs and executable graphs: a handle outside these is cudaErrorInvalidValue.
std::unordered_map<cudaGraph_t, std::unique_ptr<CUgraph_st>>& graphs() {
  static auto* table = new std::unordered_map<cudaGraph_t, std::unique_ptr<CUgraph_st>>();
  return *table;
}
std::unordered_map<cudaGraphExec_t, std::unique_ptr<CUgraphExec_st>>& graph_execs() {
  static auto* table = new std::unordered_map<cudaGraphExec_t, std::unique_ptr<CUgraphExec_st>>();
  return *table;
}

std::shared_ptr<CUevent_st> find_event(cudaEvent_t handle) {
  auto it = events().find(handle);
  return it == events().end() ? nullptr : it->second;
}

bool launch_dims_valid(const LaunchConfig& c) {
  const dim3 b = c.block, g = c.grid;
  if (b.x == 0 || b.y == 0 || b.z == 0 || g.x == 0 || g.y == 0 || g.z == 0) return false;
  if (b.x > 1024 || b.y > 1024 || b.z > 64) return false;
  if (std::uint64_t{b.x} * b.y * b.z > 1024) return false;
  if (g.x > 2147483647u || g.y > 65535 || g.z > 65535) return false;
  return true;
}

}  // namespace

// ---- The seam (emulator.h) and the emulator's shared state (internal.h).

namespace {
Settings& mutable_settings() {
  static Settings s = read_settings();
  return s;
}
}  // namespace

const Settings& settings() {
  return mutable_settings();
}

void set_order(const std::string& order) {
  Entry entry;
  parse_order(order, mutable_settings());
}

std::recursive_mutex& runtime_mutex() {
  static auto* mutex = new std::recursive_mutex();
  return *mutex;
}

const char* running_device_work() {
  return g_running_work;
}

void set_running_device_work(const char* what) {
  g_running_work = what;
}

bool replaying_graph() {
  return g_replaying_graph;
}

void set_replaying_graph(bool on) {
  g_replaying_graph = on;
}

cudaError_t record_error(cudaError_t status) {
  if (status != cudaSuccess) g_last_error = status;
  return status;
}

void fault(const std::string& message) {
  memory::mark_faulting();
  std::string text = "cuda emulator: " + message;
  if (const char* thread = running_thread_description();
      thread && message.find(thread) == std::string::npos)
    text += std::string(" [") + thread + "]";
  text += "\n";
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
  std::abort();
}

void enqueue(cudaStream_t handle, const char* what, std::function<void()> work,
             bool shares_memory) {
  Entry entry;
  std::shared_ptr<streams::Stream> stream = streams::find(handle);
  if (!stream) fault(std::string(what) + ": enqueued on a stream that does not exist");
  if (const cudaError_t status = streams::check_enqueue(stream); status != cudaSuccess) {
    record_error(status);  // an invalidated capture: the work is dropped, the capture fails
    return;
  }
  streams::enqueue(stream, what,
                   shares_memory ? streams::Kind::shared_device : streams::Kind::device,
                   std::move(work));
}

bool is_device_range(const void* p, std::size_t bytes) {
  Entry entry;
  return memory::is_device_range(p, bytes);
}

bool is_pinned_host_range(const void* p, std::size_t bytes) {
  Entry entry;
  return memory::is_pinned_range(p, bytes);
}

void submit_launch(KernelLaunch launch) {
  Entry entry;
  take_declaration(launch);
  std::shared_ptr<streams::Stream> stream = streams::find(launch.config.stream);
  if (!stream) {
    fail(cudaErrorInvalidResourceHandle);
    return;
  }
  if (!launch_dims_valid(launch.config)) {
    fail(cudaErrorInvalidConfiguration);
    return;
  }
  if (!dynamic_shared_allowed(launch.function, launch.config.shared_bytes)) {
    fail(cudaErrorInvalidValue);
    return;
  }
  if (const cudaError_t status = streams::check_enqueue(stream); status != cudaSuccess) {
    fail(status);
    return;
  }
  auto description =
      std::make_shared<std::string>(std::string("kernel ") + launch.name + " (" + launch.file +
                                    ":" + std::to_string(launch.line) + ")");
  auto shared = std::make_shared<KernelLaunch>(std::move(launch));
  streams::enqueue(stream, description->c_str(), streams::Kind::device, [shared, description] {
    execute_kernel(*shared);
    record_launch(*shared);
  });
}

}  // namespace cuda_emulator

using namespace cuda_emulator;

// ---- Errors.

extern "C" {

cudaError_t cudaGetLastError() {
  const cudaError_t status = g_last_error;
  g_last_error = cudaSuccess;
  return status;
}

cudaError_t cudaPeekAtLastError() {
  return g_last_error;
}

// ---- Memory.

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  Entry entry;
  if (const cudaError_t status = streams::check_unsafe_call(); status != cudaSuccess)
    return fail(status);
  return fail(memory::allocate_device(devPtr, size));
}

// cudaFree waits for the device first, as CUDA's does.
cudaError_t cudaFree(void* devPtr) {
  Entry entry;
  if (const cudaError_t status = streams::check_unsafe_call(); status != cudaSuccess)
    return fail(status);
  streams::drain_all();
  return fail(memory::free_device(devPtr));
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  Entry entry;
  if (const cudaError_t status = streams::check_unsafe_call(); status != cudaSuccess)
    return fail(status);
  return fail(memory::allocate_pinned(ptr, size));
}

cudaError_t cudaFreeHost(void* ptr) {
  Entry entry;
  if (const cudaError_t status = streams::check_unsafe_call(); status != cudaSuccess)
    return fail(status);
  streams::drain_all();
  return fail(memory::free_pinned(ptr));
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  Entry entry;
  if (!free || !total) return fail(cudaErrorInvalidValue);
  *total = kDeviceMemoryBytes;
  *free = kDeviceMemoryBytes - memory::allocated_bytes();
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  Entry entry;
  if (!attributes) return fail(cudaErrorInvalidValue);
  *attributes = cudaPointerAttributes{};
  attributes->device = -1;
  if (memory::is_device_range(ptr, 1)) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->device = 0;
    attributes->devicePointer = const_cast<void*>(ptr);
  } else if (memory::is_pinned_range(ptr, 1)) {
    attributes->type = cudaMemoryTypeHost;
    attributes->device = 0;
    attributes->devicePointer = const_cast<void*>(ptr);
    attributes->hostPointer = const_cast<void*>(ptr);
  } else if (memory::in_device_region(ptr)) {
    return fail(cudaErrorInvalidValue);  // freed or never allocated device memory
  } else {
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->hostPointer = const_cast<void*>(ptr);
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  Entry entry;
  return copy(dst, src, count, kind, nullptr, true);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  Entry entry;
  return copy(dst, src, count, kind, stream, false);
}

cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                         size_t height, cudaMemcpyKind kind) {
  Entry entry;
  return copy_2d(dst, dpitch, src, spitch, width, height, kind, nullptr, true);
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream) {
  Entry entry;
  return copy_2d(dst, dpitch, src, spitch, width, height, kind, stream, false);
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  Entry entry;
  return set(devPtr, value, count, nullptr, true);
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  Entry entry;
  return set(devPtr, value, count, stream, false);
}

// ---- Streams.

cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  Entry entry;
  return fail(streams::create(pStream, cudaStreamDefault));
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  Entry entry;
  return fail(streams::create(pStream, flags));
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  Entry entry;
  return fail(streams::destroy(stream));
}

cudaError_t cudaStreamSynchronize(cudaStream_t handle) {
  Entry entry;
  std::shared_ptr<streams::Stream> stream = streams::find(handle);
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  if (streams::capturing(stream))
    return fail(streams::invalidate(stream, cudaErrorStreamCaptureUnsupported));
  streams::drain_stream(stream);
  return cudaSuccess;
}

// Pending work: cudaErrorNotReady, and the work runs (the next query finds it done), so a caller's
// not-ready path is taken at least once and a polling loop still ends.
cudaError_t cudaStreamQuery(cudaStream_t handle) {
  Entry entry;
  std::shared_ptr<streams::Stream> stream = streams::find(handle);
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  if (streams::capturing(stream))
    return fail(streams::invalidate(stream, cudaErrorStreamCaptureUnsupported));
  if (streams::stream_idle(stream)) return cudaSuccess;
  streams::drain_stream(stream);
  return cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t handle, cudaEvent_t event, unsigned int flags) {
  Entry entry;
  std::shared_ptr<streams::Stream> stream = streams::find(handle);
  std::shared_ptr<CUevent_st> e = find_event(event);
  if (!stream || !e) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t status = streams::check_enqueue(stream); status != cudaSuccess)
    return fail(status);
  if (e->captured) return fail(streams::wait_mark(stream, *e->captured));
  if (!e->recorded.stream) return cudaSuccess;  // never recorded: nothing to wait for
  // Work outside the capture: a dependency across its boundary (done or not).
  if (streams::capturing(stream))
    return fail(streams::invalidate(stream, cudaErrorStreamCaptureIsolation));
  const streams::Ticket recorded = e->recorded;
  streams::enqueue(stream, "cudaStreamWaitEvent", streams::Kind::marker, nullptr, &recorded);
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t handle, cudaHostFn_t fn, void* userData) {
  Entry entry;
  std::shared_ptr<streams::Stream> stream = streams::find(handle);
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  if (!fn) return fail(cudaErrorInvalidValue);
  if (const cudaError_t status = streams::check_enqueue(stream); status != cudaSuccess)
    return fail(status);
  streams::enqueue(stream, "cudaLaunchHostFunc", streams::Kind::host,
                   [fn, userData] { fn(userData); });
  return cudaSuccess;
}

// Waits for every stream, capturing ones included: refused while any capture is in progress.
cudaError_t cudaDeviceSynchronize() {
  Entry entry;
  if (streams::any_capture()) {
    if (const cudaError_t status = streams::check_unsafe_call(); status != cudaSuccess)
      return fail(status);
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  streams::drain_all();
  return cudaSuccess;
}

// ---- Events.

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  Entry entry;
  if (!event) return fail(cudaErrorInvalidValue);
  constexpr unsigned kKnown =
      cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (flags & ~kKnown) return fail(cudaErrorInvalidValue);
  auto e = std::make_shared<CUevent_st>();
  e->flags = flags;
  *event = e.get();
  events().emplace(*event, std::move(e));
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  Entry entry;
  if (events().erase(event) == 0) return fail(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

// The event's time is the host's clock when its marker runs in stream order.
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t handle) {
  Entry entry;
  std::shared_ptr<CUevent_st> e = find_event(event);
  std::shared_ptr<streams::Stream> stream = streams::find(handle);
  if (!e || !stream) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t status = streams::check_enqueue(stream); status != cudaSuccess)
    return fail(status);
  const std::uint64_t generation = ++e->generation;
  if (streams::capturing(stream)) {
    e->captured = std::make_shared<streams::CaptureMark>(streams::mark(stream));
    e->recorded = {};
    return cudaSuccess;
  }
  e->captured.reset();
  e->recorded = streams::enqueue(stream, "cudaEventRecord", streams::Kind::marker, [e, generation] {
    if (e->generation != generation) return;
    e->time_ms = now_ms();
    e->timed_generation = generation;
  });
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  Entry entry;
  std::shared_ptr<CUevent_st> e = find_event(event);
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  if (e->captured) return fail(cudaErrorCapturedEvent);
  streams::drain(e->recorded);
  return cudaSuccess;
}

// As cudaStreamQuery: not ready once, and the work up to the record runs.
cudaError_t cudaEventQuery(cudaEvent_t event) {
  Entry entry;
  std::shared_ptr<CUevent_st> e = find_event(event);
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  if (e->captured) return fail(cudaErrorCapturedEvent);
  if (streams::done(e->recorded)) return cudaSuccess;
  streams::drain(e->recorded);
  return cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  Entry entry;
  std::shared_ptr<CUevent_st> a = find_event(start), b = find_event(end);
  if (!ms) return fail(cudaErrorInvalidValue);
  if (!a || !b) return fail(cudaErrorInvalidResourceHandle);
  if ((a->flags | b->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
  if (a->captured || b->captured) return fail(cudaErrorCapturedEvent);
  if (!a->recorded.stream || !b->recorded.stream) return fail(cudaErrorInvalidResourceHandle);
  if (!streams::done(a->recorded) || !streams::done(b->recorded)) return fail(cudaErrorNotReady);
  *ms = static_cast<float>(b->time_ms - a->time_ms);
  return cudaSuccess;
}

// ---- Kernels.

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  Entry entry;
  if (!func) return fail(cudaErrorInvalidDeviceFunction);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize)
    return fail(set_max_dynamic_shared(func, value));
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout)
    return value >= -1 && value <= 100 ? cudaSuccess : fail(cudaErrorInvalidValue);
  return fail(cudaErrorInvalidValue);
}

// ---- Stream capture and graphs (streams.h: what capture records and refuses).

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  Entry entry;
  return fail(streams::exchange_capture_mode(mode));
}

cudaError_t cudaStreamBeginCapture(cudaStream_t handle, cudaStreamCaptureMode mode) {
  Entry entry;
  std::shared_ptr<streams::Stream> stream = streams::find(handle);
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  return fail(streams::begin_capture(stream, mode));
}

cudaError_t cudaStreamEndCapture(cudaStream_t handle, cudaGraph_t* graph) {
  Entry entry;
  std::shared_ptr<streams::Stream> stream = streams::find(handle);
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  if (!graph) return fail(cudaErrorInvalidValue);
  *graph = nullptr;
  auto g = std::make_unique<CUgraph_st>();
  if (const cudaError_t status = streams::end_capture(stream, &g->nodes); status != cudaSuccess)
    return fail(status);
  *graph = g.get();
  graphs().emplace(*graph, std::move(g));
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t handle, cudaStreamCaptureStatus* status) {
  Entry entry;
  std::shared_ptr<streams::Stream> stream = streams::find(handle);
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  if (!status) return fail(cudaErrorInvalidValue);
  // Asking about the legacy stream while a blocking stream captures is an implicit dependency.
  if (stream == streams::find(nullptr))
    if (const cudaError_t e = streams::check_enqueue(stream); e != cudaSuccess) return fail(e);
  *status = streams::capture_status(stream);
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* numNodes) {
  Entry entry;
  auto it = graphs().find(graph);
  if (it == graphs().end() || !numNodes) return fail(cudaErrorInvalidValue);
  CUgraph_st& g = *it->second;
  if (nodes) {
    while (g.handles.size() < g.nodes.size())
      g.handles.push_back(std::make_unique<CUgraphNode_st>());
    const std::size_t n = std::min(*numNodes, g.nodes.size());
    for (std::size_t i = 0; i < n; ++i) nodes[i] = g.handles[i].get();
    for (std::size_t i = n; i < *numNodes; ++i) nodes[i] = nullptr;
  }
  *numNodes = g.nodes.size();
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  Entry entry;
  if (graphs().erase(graph) == 0) return fail(cudaErrorInvalidValue);
  return cudaSuccess;
}

// Flags the emulator does not implement (upload, device launch, auto free) are refused.
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags) {
  Entry entry;
  if (!exec) return fail(cudaErrorInvalidValue);
  auto it = graphs().find(graph);
  if (it == graphs().end() || flags != 0) return fail(cudaErrorInvalidValue);
  // Instantiating is not capturable: it is one of the calls a capture prohibits.
  if (const cudaError_t status = streams::check_unsafe_call(); status != cudaSuccess)
    return fail(status);
  auto e = std::make_unique<CUgraphExec_st>();
  e->nodes = it->second->nodes;  // the executable graph is independent of its source
  *exec = e.get();
  graph_execs().emplace(*exec, std::move(e));
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  Entry entry;
  if (graph_execs().erase(exec) == 0) return fail(cudaErrorInvalidValue);
  return cudaSuccess;
}

// The nodes, in order, as work of `stream` (into its capture, if it captures: a child graph).
// One host launch, counted as "cudaGraphLaunch"; each node's work counts as a graph launch.
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t handle) {
  Entry entry;
  auto it = graph_execs().find(exec);
  if (it == graph_execs().end()) return fail(cudaErrorInvalidValue);
  std::shared_ptr<streams::Stream> stream = streams::find(handle);
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t status = streams::check_enqueue(stream); status != cudaSuccess)
    return fail(status);
  const bool captured = streams::capturing(stream);
  for (const streams::Node& node : it->second->nodes) {
    std::function<void()> work = node.work;
    if (!captured && work)
      work = [work = std::move(work)] {
        const bool previous = replaying_graph();
        set_replaying_graph(true);
        work();
        set_replaying_graph(previous);
      };
    streams::enqueue(stream, node.what, node.kind, std::move(work));
  }
  if (!captured) count_library_call(transfer_row("cudaGraphLaunch", 0, 0));
  return cudaSuccess;
}

}  // extern "C"
