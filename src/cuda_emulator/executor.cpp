#include "cuda_emulator/executor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_emulator/counters.h"
#include "cuda_emulator/device_api.h"
#include "cuda_emulator/emulator.h"
#include "cuda_emulator/fiber.h"
#include "cuda_emulator/internal.h"

namespace cuda_emulator {

namespace device {
constinit thread_local Builtins builtins;
}

namespace {

// A device thread's stack: kernels keep a few arrays there; printf and the fault paths need more.
constexpr std::size_t kStackBytes = 256 * 1024;

std::size_t page_bytes() {
  static const std::size_t bytes = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return bytes;
}

std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

// splitmix64: the seeded orders' random numbers (the same on every platform).
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The kernels' attributes, by kernel address: the dynamic shared-memory limit cudaFuncSetAttribute
// set (-1: none) and the static shared memory a run measured (0 until one did).
struct Attributes {
  int max_dynamic_shared = -1;
  std::size_t static_shared = 0;
};
std::unordered_map<const void*, Attributes>& attributes() {
  static auto* table = new std::unordered_map<const void*, Attributes>();
  return *table;
}

std::string format_dim(const uint3& d) {
  char text[64];
  std::snprintf(text, sizeof text, "(%u,%u,%u)", d.x, d.y, d.z);
  return text;
}

enum class State { runnable, at_block_barrier, at_warp_barrier, exited };

struct DeviceThread {
  State state = State::runnable;
  int fiber = -1;  // the fiber it runs on, from its first resume to its exit
  // At a warp barrier: its mask, what it is (a __syncwarp or which shuffle), where, the value it
  // gives, the lane it asks for and the value it gets.
  unsigned mask = 0;
  const char* operation = nullptr;
  const char* file = nullptr;
  int line = 0;
  std::size_t bytes = 0;
  int source = -1;
  alignas(16) unsigned char given[device::kExchangeBytes];
  alignas(16) unsigned char received[device::kExchangeBytes];
};

// Runs the blocks of launches on one host thread: its fibers (one per device thread of the largest
// block so far, kept for the thread's lifetime), its shared-memory arena, and the state of the
// block that runs now.
class Executor {
 public:
  static Executor& here() {
    thread_local Executor executor;
    return executor;
  }

  void run(const KernelLaunch& launch);

  void sync_block(const char* file, int line);
  void warp_barrier(unsigned mask, const char* operation, const void* value, void* result,
                    std::size_t bytes, int source, const char* file, int line,
                    device::WarpResolver resolve = nullptr, std::size_t result_bytes = 0);
  void* static_shared(device::SharedSlot& slot, std::size_t bytes, std::size_t align);
  void* dynamic_shared() const { return arena_ + arena_bytes_ - round_up(dynamic_bytes_, 16); }

  bool running() const { return launch_ != nullptr && in_thread_; }
  std::string where() const;
  bool in_stack_guard(const void* address) const {
    for (const auto& fiber : fibers_)
      if (fiber->guard_contains(address)) return true;
    return false;
  }
  bool in_shared_guard(const void* address) const {
    const char* a = static_cast<const char*>(address);
    return arena_ && ((a >= arena_ - page_bytes() && a < arena_) ||
                      (a >= arena_ + arena_bytes_ && a < arena_ + arena_bytes_ + page_bytes()));
  }
  [[noreturn]] void fail(const std::string& what) const;

 private:
  Executor();
  ~Executor() = default;

  static void fiber_main(void* self);
  void run_block(std::uint64_t linear_block);
  void begin_block(std::uint64_t linear_block);
  void thread_order(std::uint64_t linear_block);
  void switch_to_scheduler() { fibers_[threads_[current_].fiber]->suspend_to(scheduler_stack_); }
  unsigned free_fiber();
  void exit_current();
  void check_shared_limit() const;
  std::string describe_threads() const;
  uint3 thread_index(unsigned linear) const {
    const dim3 b = launch_->config.block;
    return {linear % b.x, linear / b.x % b.y, linear / (b.x * b.y)};
  }

  // A thread takes a free fiber when it first runs and gives it back when it exits, so a kernel
  // without barriers runs every thread on one fiber (its stack stays in cache), and only threads
  // waiting at a barrier hold one.
  std::vector<std::unique_ptr<Fiber>> fibers_;
  std::vector<unsigned> free_fibers_;
  std::vector<DeviceThread> threads_;
  // Per warp, as bit masks of its lanes (bit l: lane l): those at a warp barrier, and those that
  // exited in this block. A barrier's checks and its completion read these instead of scanning
  // every lane's state at every lane's arrival (the emulator's warp barrier was 20 % of a counted
  // step, issue 63).
  std::vector<std::uint32_t> warp_waiting_, warp_exited_;
  std::vector<unsigned> order_;
  void* scheduler_stack_ = nullptr;

  char* arena_ = nullptr;  // the block's shared memory, between two guard pages
  std::size_t arena_bytes_ = 0;
  std::size_t static_used_ = 0, static_high_water_ = 0, dynamic_bytes_ = 0;
  std::uint64_t block_serial_ = 0;

  const KernelLaunch* launch_ = nullptr;
  Attributes* attributes_ = nullptr;
  unsigned thread_count_ = 0, current_ = 0, exited_ = 0, at_block_barrier_ = 0;
  const char* block_barrier_file_ = nullptr;
  int block_barrier_line_ = 0;
  bool in_thread_ = false;
};

Executor::Executor() {
  const std::size_t page = page_bytes();
  arena_bytes_ = round_up(kOptInSharedBytes, page);
  void* mapping = mmap(nullptr, arena_bytes_ + 2 * page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapping == MAP_FAILED) fault("cannot map the shared-memory arena");
  arena_ = static_cast<char*>(mapping) + page;
  if (mprotect(mapping, page, PROT_NONE) != 0 ||
      mprotect(arena_ + arena_bytes_, page, PROT_NONE) != 0)
    fault("cannot protect the shared-memory arena's guard pages");
}

void Executor::fiber_main(void* self) {
  auto* executor = static_cast<Executor*>(self);
  for (;;) {
    try {
      executor->launch_->run_thread(executor->launch_->params.get());
    } catch (...) {
      executor->fail("a device thread threw a C++ exception");
    }
    executor->exit_current();
  }
}

void Executor::run(const KernelLaunch& launch) {
  const dim3 block = launch.config.block, grid = launch.config.grid;
  launch_ = &launch;
  attributes_ = &attributes()[launch.function];
  thread_count_ = block.x * block.y * block.z;
  dynamic_bytes_ = launch.config.shared_bytes;
  threads_.resize(std::max<std::size_t>(threads_.size(), thread_count_));
  warp_waiting_.assign((thread_count_ + device::kWarpSize - 1) / device::kWarpSize, 0);
  warp_exited_.assign(warp_waiting_.size(), 0);
  device::builtins.block_dim = block;
  device::builtins.grid_dim = grid;

  const std::uint64_t blocks = std::uint64_t{grid.x} * grid.y * grid.z;
  const Settings& s = settings();
  // The block order: forward, reverse, or an affine permutation i -> (a·i + c) mod blocks with a
  // seeded multiplier coprime to the count (a shuffle that needs no table for 2^31 blocks).
  std::uint64_t multiplier = 1, offset = 0;
  if (s.order == Order::shuffle && blocks > 1) {
    const std::uint64_t r = mix(s.seed ^ 0x5bd1e995u);
    multiplier = r % blocks | 1;
    while (std::gcd(multiplier, blocks) != 1) multiplier += 2;
    offset = mix(r) % blocks;
  }
  for (std::uint64_t i = 0; i < blocks; ++i) {
    std::uint64_t b = i;
    if (s.order == Order::reverse)
      b = blocks - 1 - i;
    else if (s.order == Order::shuffle)
      b = static_cast<std::uint64_t>((static_cast<unsigned __int128>(multiplier) * i + offset) %
                                     blocks);
    run_block(b);
  }
  attributes_->static_shared = std::max(attributes_->static_shared, static_high_water_);
  launch_ = nullptr;
}

void Executor::begin_block(std::uint64_t linear_block) {
  const dim3 grid = launch_->config.grid;
  device::builtins.block_idx = {
      static_cast<unsigned>(linear_block % grid.x),
      static_cast<unsigned>(linear_block / grid.x % grid.y),
      static_cast<unsigned>(linear_block / (std::uint64_t{grid.x} * grid.y))};
  ++block_serial_;
  static_used_ = 0;
  // Shared memory holds what no thread of this block wrote: 0xFF bytes, NaN in fp32 and bf16 (the
  // static variables are poisoned as the block first reaches each, in static_shared).
  if (settings().poison) std::memset(dynamic_shared(), 0xFF, round_up(dynamic_bytes_, 16));
  for (unsigned t = 0; t < thread_count_; ++t) {
    threads_[t].state = State::runnable;
    threads_[t].fiber = -1;
  }
  exited_ = 0;
  at_block_barrier_ = 0;
  std::fill(warp_waiting_.begin(), warp_waiting_.end(), 0u);
  std::fill(warp_exited_.begin(), warp_exited_.end(), 0u);
  thread_order(linear_block);
}

void Executor::thread_order(std::uint64_t linear_block) {
  order_.resize(thread_count_);
  for (unsigned t = 0; t < thread_count_; ++t) order_[t] = t;
  const Settings& s = settings();
  if (s.order == Order::reverse) {
    std::reverse(order_.begin(), order_.end());
  } else if (s.order == Order::shuffle) {
    std::uint64_t state = mix(s.seed) ^ mix(linear_block + 1);
    for (unsigned t = thread_count_; t > 1; --t) {  // Fisher-Yates
      state = mix(state);
      std::swap(order_[t - 1], order_[state % t]);
    }
  }
}

void Executor::run_block(std::uint64_t linear_block) {
  begin_block(linear_block);
  // Rounds: each round resumes, in the chosen order, every thread that can run; a thread runs
  // until it reaches a barrier or exits. A barrier's last arrival makes its threads runnable.
  while (exited_ < thread_count_) {
    bool ran = false;
    for (unsigned t : order_) {
      if (threads_[t].state != State::runnable) continue;
      current_ = t;
      device::builtins.thread_idx = thread_index(t);
      device::builtins.linear_thread = t;
      in_thread_ = true;
      if (threads_[t].fiber < 0) threads_[t].fiber = static_cast<int>(free_fiber());
      fibers_[threads_[t].fiber]->resume(&scheduler_stack_);
      in_thread_ = false;
      ran = true;
    }
    if (!ran) fail("deadlock: no thread of the block can run; " + describe_threads());
  }
  static_high_water_ = std::max(static_high_water_, static_used_);
}

void Executor::exit_current() {
  DeviceThread& me = threads_[current_];
  me.state = State::exited;
  ++exited_;
  if (at_block_barrier_ > 0)
    fail("the thread exited while " + std::to_string(at_block_barrier_) +
         " threads of its block wait at __syncthreads (" + block_barrier_file_ + ":" +
         std::to_string(block_barrier_line_) +
         "): a barrier that not every thread reaches is undefined on a GPU");
  const unsigned warp = current_ / device::kWarpSize, lane = current_ % device::kWarpSize;
  warp_exited_[warp] |= 1u << lane;
  for (std::uint32_t waiting = warp_waiting_[warp]; waiting; waiting &= waiting - 1) {
    const unsigned l = static_cast<unsigned>(std::countr_zero(waiting));
    const DeviceThread& other = threads_[warp * device::kWarpSize + l];
    if (other.mask >> lane & 1u)
      fail("the lane exited while lane " + std::to_string(l) + " waits for it at " +
           other.operation + " (" + other.file + ":" + std::to_string(other.line) +
           "), whose mask names it");
  }
  free_fibers_.push_back(static_cast<unsigned>(me.fiber));
  switch_to_scheduler();
}

unsigned Executor::free_fiber() {
  if (free_fibers_.empty()) {
    fibers_.push_back(std::make_unique<Fiber>(kStackBytes, &Executor::fiber_main, this));
    return static_cast<unsigned>(fibers_.size() - 1);
  }
  const unsigned f = free_fibers_.back();
  free_fibers_.pop_back();
  return f;
}

void Executor::sync_block(const char* file, int line) {
  if (exited_ > 0)
    fail(std::string("__syncthreads at ") + file + ":" + std::to_string(line) +
         " is reached after " + std::to_string(exited_) +
         " threads of the block exited: a barrier that not every thread reaches is undefined");
  if (at_block_barrier_ == 0) {
    block_barrier_file_ = file;
    block_barrier_line_ = line;
  } else if (line != block_barrier_line_ || std::strcmp(file, block_barrier_file_) != 0) {
    fail(std::string("threads of one block wait at different __syncthreads: this one at ") + file +
         ":" + std::to_string(line) + ", " + std::to_string(at_block_barrier_) + " others at " +
         block_barrier_file_ + ":" + std::to_string(block_barrier_line_));
  }
  threads_[current_].state = State::at_block_barrier;
  if (++at_block_barrier_ == thread_count_) {
    for (unsigned t = 0; t < thread_count_; ++t) threads_[t].state = State::runnable;
    at_block_barrier_ = 0;
  }
  switch_to_scheduler();
}

void Executor::warp_barrier(unsigned mask, const char* operation, const void* value, void* result,
                            std::size_t bytes, int source, const char* file, int line,
                            device::WarpResolver resolve, std::size_t result_bytes) {
  const unsigned warp = current_ / device::kWarpSize, lane = current_ % device::kWarpSize;
  const unsigned base = warp * device::kWarpSize;
  const unsigned lanes = std::min<unsigned>(device::kWarpSize, thread_count_ - base);
  const unsigned existing = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
  auto site = [&] {
    char text[512];
    std::snprintf(text, sizeof text, "%s at %s:%d (mask 0x%08x)", operation, file, line, mask);
    return std::string(text);
  };
  if (!(mask >> lane & 1u)) fail(site() + ": the calling lane is not in the mask");
  if (mask & ~existing)
    fail(site() + ": the mask names lanes that this warp of " + std::to_string(lanes) +
         " threads does not have");
  if (const std::uint32_t exited = warp_exited_[warp] & mask)
    fail(site() + ": lane " + std::to_string(std::countr_zero(exited)) + " of the mask has exited");
  for (std::uint32_t waiting = warp_waiting_[warp] & mask; waiting; waiting &= waiting - 1) {
    const unsigned l = static_cast<unsigned>(std::countr_zero(waiting));
    const DeviceThread& other = threads_[base + l];
    if (other.mask != mask)
      fail(site() + ": lane " + std::to_string(l) + " waits at " + other.operation + " (" +
           other.file + ":" + std::to_string(other.line) + ") with another mask");
  }
  DeviceThread& me = threads_[current_];
  me.state = State::at_warp_barrier;
  me.mask = mask;
  me.operation = operation;
  me.file = file;
  me.line = line;
  me.bytes = bytes;
  me.source = source;
  if (bytes) std::memcpy(me.given, value, bytes);
  warp_waiting_[warp] |= 1u << lane;

  const bool complete = (warp_waiting_[warp] & mask) == mask;
  if (complete && resolve) {
    // A collective instruction: every lane met at the same site (checked below as for the
    // shuffles); the resolver computes all lanes' results at once.
    const unsigned char* given[device::kWarpSize];
    unsigned char* received[device::kWarpSize];
    for (unsigned l = 0; l < lanes; ++l) {
      DeviceThread& t = threads_[base + l];
      if ((t.operation != operation && std::strcmp(t.operation, operation) != 0) ||
          t.bytes != bytes || t.line != line || (t.file != file && std::strcmp(t.file, file) != 0))
        fail(site() + " meets lane " + std::to_string(l) + " at " + t.operation + " (" + t.file +
             ":" + std::to_string(t.line) +
             "): the lanes of a warp must meet at the same instruction");
      given[l] = t.given;
      received[l] = t.received;
    }
    resolve(given, received);
    for (unsigned l = 0; l < lanes; ++l) threads_[base + l].state = State::runnable;
    warp_waiting_[warp] &= ~existing;
  } else if (complete) {
    for (unsigned l = 0; l < lanes; ++l) {
      if (!(mask >> l & 1u)) continue;
      DeviceThread& t = threads_[base + l];
      const bool same_site = t.line == line && (t.file == file || std::strcmp(t.file, file) == 0);
      if ((t.operation != operation && std::strcmp(t.operation, operation) != 0) ||
          t.bytes != bytes || (bytes > 0 && !same_site))
        fail(site() + " meets lane " + std::to_string(l) + " at " + t.operation + " (" + t.file +
             ":" + std::to_string(t.line) +
             "): the lanes of a mask must meet at the same intrinsic");
      if (t.source < 0)
        std::memcpy(t.received, t.given, bytes);
      else if (static_cast<unsigned>(t.source) < lanes && (mask >> t.source & 1u))
        std::memcpy(t.received, threads_[base + t.source].given, bytes);
      else
        std::memset(t.received, 0xFF, bytes);  // a lane outside the mask: undefined
      t.state = State::runnable;
      warp_waiting_[warp] &= ~(1u << l);
    }
  }
  switch_to_scheduler();
  if (resolve)
    std::memcpy(result, me.received, result_bytes);
  else if (bytes)
    std::memcpy(result, me.received, bytes);
}

void* Executor::static_shared(device::SharedSlot& slot, std::size_t bytes, std::size_t align) {
  if (slot.block_serial == block_serial_) return arena_ + slot.offset;
  const std::size_t offset = round_up(static_used_, std::max<std::size_t>(align, 1));
  static_used_ = offset + bytes;
  check_shared_limit();
  if (settings().poison) std::memset(arena_ + offset, 0xFF, bytes);
  slot.block_serial = block_serial_;
  slot.offset = static_cast<std::uint32_t>(offset);
  return arena_ + offset;
}

// A GPU checks these at the launch, where it knows the kernel's static shared memory; the
// emulator learns that on the first run and checks later launches at the launch too.
void Executor::check_shared_limit() const {
  const int attribute = attributes_->max_dynamic_shared;
  if (attribute >= 0) {
    if (static_used_ + static_cast<std::size_t>(attribute) > kOptInSharedBytes)
      fail("static shared memory of " + std::to_string(static_used_) +
           " bytes and the kernel's dynamic limit of " + std::to_string(attribute) +
           " bytes (cudaFuncSetAttribute) exceed the device's " +
           std::to_string(kOptInSharedBytes) + " bytes per block: a GPU refuses the attribute");
    return;
  }
  if (static_used_ + dynamic_bytes_ > kDefaultSharedBytes)
    fail("static shared memory of " + std::to_string(static_used_) + " bytes and dynamic of " +
         std::to_string(dynamic_bytes_) + " bytes exceed the default " +
         std::to_string(kDefaultSharedBytes) +
         " bytes per block (cudaFuncAttributeMaxDynamicSharedMemorySize not raised): a GPU "
         "refuses this launch (cudaErrorInvalidValue)");
}

std::string Executor::where() const {
  if (!launch_) return "no kernel";
  char text[1024];
  const uint3 thread = thread_index(current_);
  std::snprintf(text, sizeof text, "kernel %s (launched at %s:%d), block %s, thread %s",
                launch_->name, launch_->file, launch_->line,
                format_dim(device::builtins.block_idx).c_str(), format_dim(thread).c_str());
  return text;
}

// "N threads at __syncthreads (file:line): (0,0,0) ..., M at __syncwarp ...", the first few of
// each.
std::string Executor::describe_threads() const {
  std::string text;
  auto list = [&](State state, const char* label) {
    unsigned count = 0;
    std::string first;
    for (unsigned t = 0; t < thread_count_; ++t) {
      if (threads_[t].state != state) continue;
      if (count < 4) {
        first += " " + format_dim(thread_index(t));
        if (state == State::at_warp_barrier)
          first += std::string(" at ") + threads_[t].operation + " (" + threads_[t].file + ":" +
                   std::to_string(threads_[t].line) + ")";
      }
      ++count;
    }
    if (count == 0) return;
    if (!text.empty()) text += "; ";
    text += std::to_string(count) + " threads " + label + ":" + first + (count > 4 ? " ..." : "");
  };
  const std::string block_site = block_barrier_file_
                                     ? std::string("at __syncthreads (") + block_barrier_file_ +
                                           ":" + std::to_string(block_barrier_line_) + ")"
                                     : "at __syncthreads";
  list(State::at_block_barrier, block_site.c_str());
  list(State::at_warp_barrier, "at warp barriers");
  list(State::exited, "exited");
  return text;
}

void Executor::fail(const std::string& what) const {
  fault(what + " [" + where() + "]");
}

}  // namespace

namespace {
// The tensor-core FLOPs of the kernel running on this host thread.
thread_local std::uint64_t running_tensor_flops = 0;

struct CounterTable {
  std::mutex mutex;
  std::vector<KernelCounters> rows;
  std::unordered_map<std::string, std::size_t> index;
};
CounterTable& counter_table() {
  static auto* table = new CounterTable();
  return *table;
}

void add_counters(CounterTable& t, const KernelCounters& c) {
  std::lock_guard<std::mutex> lock(t.mutex);
  auto [it, added] = t.index.try_emplace(c.kernel, t.rows.size());
  if (added) {
    t.rows.push_back(c);
    t.rows.back().launches = t.rows.back().graph_launches = 0;
    t.rows.back().tensor_flops = t.rows.back().other_flops = 0;
    t.rows.back().bytes_read = t.rows.back().bytes_written = t.rows.back().undeclared = 0;
  }
  KernelCounters& row = t.rows[it->second];
  row.launches += c.launches;
  row.graph_launches += replaying_graph() ? c.launches : c.graph_launches;
  row.tensor_flops += c.tensor_flops;
  row.other_flops += c.other_flops;
  row.bytes_read += c.bytes_read;
  row.bytes_written += c.bytes_written;
  row.undeclared += c.undeclared;
}

thread_local std::optional<LaunchDeclaration> pending_declaration;
std::atomic<bool> count_only_mode{false};
}  // namespace

void count_library_call(const KernelCounters& call) {
  add_counters(counter_table(), call);
}

std::vector<KernelCounters> kernel_counters() {
  CounterTable& t = counter_table();
  std::lock_guard<std::mutex> lock(t.mutex);
  return t.rows;
}

void reset_kernel_counters() {
  CounterTable& t = counter_table();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.rows.clear();
  t.index.clear();
}

void declare_next_launch(const LaunchDeclaration& declaration) {
  if (pending_declaration)
    fault(std::string("a launch cost declared in ") + pending_declaration->file +
          " was followed by another declaration, not by its launch");
  pending_declaration = declaration;
}

void take_declaration(KernelLaunch& launch) {
  if (!pending_declaration) return;
  const LaunchDeclaration d = *pending_declaration;
  pending_declaration.reset();
  if (!d.file || !launch.file || std::strcmp(d.file, launch.file) != 0)
    fault(std::string("a launch cost declared in ") + (d.file ? d.file : "?") +
          " was taken by kernel " + launch.name + " launched in " + launch.file +
          ": the declaring launcher did not launch");
  launch.declared = true;
  launch.cost = d;
}

void set_count_only(bool on) {
  count_only_mode = on;
}

bool count_only() {
  return count_only_mode;
}

void execute_kernel(const KernelLaunch& launch) {
  running_tensor_flops = 0;
  if (!count_only())
    Executor::here().run(launch);
  else if (launch.declared)
    running_tensor_flops = launch.cost.tensor_flops;
  if (launch.declared && running_tensor_flops != launch.cost.tensor_flops)
    fault(std::string("kernel ") + launch.name + " (" + launch.file + ":" +
          std::to_string(launch.line) + ") executed " + std::to_string(running_tensor_flops) +
          " tensor-core FLOPs; its launcher declared " + std::to_string(launch.cost.tensor_flops));
  KernelCounters row;
  row.kernel = launch.declared && launch.cost.name ? launch.cost.name : launch.name;
  row.launches = 1;
  row.tensor_flops = running_tensor_flops;
  row.other_flops = launch.cost.other_flops;
  row.bytes_read = launch.cost.bytes_read;
  row.bytes_written = launch.cost.bytes_written;
  row.undeclared = launch.declared ? 0 : 1;
  row.dim = launch.cost.dim;
  add_counters(counter_table(), row);
}

cudaError_t set_max_dynamic_shared(const void* function, int bytes) {
  std::lock_guard<std::recursive_mutex> lock(runtime_mutex());
  Attributes& a = attributes()[function];
  if (bytes < 0 || a.static_shared + static_cast<std::size_t>(bytes) > kOptInSharedBytes)
    return cudaErrorInvalidValue;
  a.max_dynamic_shared = bytes;
  return cudaSuccess;
}

bool dynamic_shared_allowed(const void* function, std::size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(runtime_mutex());
  const Attributes& a = attributes()[function];
  if (a.max_dynamic_shared >= 0) return bytes <= static_cast<std::size_t>(a.max_dynamic_shared);
  return a.static_shared + bytes <= kDefaultSharedBytes;
}

const char* running_thread_description() {
  thread_local std::string text;
  Executor& e = Executor::here();
  if (!e.running()) return nullptr;
  text = e.where();
  return text.c_str();
}

bool in_stack_guard(const void* address) {
  return Executor::here().in_stack_guard(address);
}

bool in_shared_guard(const void* address) {
  return Executor::here().in_shared_guard(address);
}

namespace device {

void sync_block(const char* file, int line) {
  Executor::here().sync_block(file, line);
}

void sync_warp(unsigned mask, const char* file, int line) {
  Executor::here().warp_barrier(mask, "__syncwarp", nullptr, nullptr, 0, -1, file, line);
}

void exchange(unsigned mask, const void* value, void* result, std::size_t bytes, int source,
              const char* operation, const char* file, int line) {
  if (bytes > kExchangeBytes) device_fault("a shuffle of more than 64 bytes");
  Executor::here().warp_barrier(mask, operation, value, result, bytes, source, file, line);
}

void warp_collective(const void* value, std::size_t bytes, void* result, std::size_t result_bytes,
                     WarpResolver resolve, const char* operation, const char* file, int line) {
  if (bytes > kExchangeBytes || result_bytes > kExchangeBytes)
    device_fault("a warp-collective operand of more than 64 bytes");
  Executor::here().warp_barrier(0xffffffffu, operation, value, result, bytes, -1, file, line,
                                resolve, result_bytes);
}

void count_tensor_flops(std::uint64_t flops) {
  running_tensor_flops += flops;
}

void* static_shared(SharedSlot& slot, std::size_t bytes, std::size_t align) {
  return Executor::here().static_shared(slot, bytes, align);
}

void* dynamic_shared() {
  return Executor::here().dynamic_shared();
}

const char* where() {
  thread_local std::string text;
  text = Executor::here().where();
  return text.c_str();
}

void device_fault(const char* what) {
  Executor::here().fail(what);
}

}  // namespace device

}  // namespace cuda_emulator
