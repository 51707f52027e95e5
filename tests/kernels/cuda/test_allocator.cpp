// The caching device allocator: its core (size classes, per-stream reuse, no growth across
// identical steps, stats, release, out-of-memory retry) on the host with a fake backing allocator,
// Buffer's allocation seam (core/device.h's DeviceMemory) with host memory behind the core, and on a GPU
// the cudaMalloc backing (skipped without one).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <set>
#include <thread>
#include <vector>

#include "core/buffer.h"
#include "core/device.h"
#include "core/error.h"
#include "core/rng.h"
#include "kernels/cuda/caching_allocator.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/device_allocator.h"

namespace boostlm::cuda {
namespace {

// Hands out distinct fake addresses (never dereferenced), 512-byte aligned, up to `capacity` bytes
// live; past it, nullptr as cudaMalloc's out-of-memory would be.
class FakeBacking final : public BackingAllocator {
 public:
  explicit FakeBacking(std::size_t capacity = SIZE_MAX) : capacity_(capacity) {}
  void* allocate(std::size_t bytes) override {
    if (live_bytes + bytes > capacity_) return nullptr;
    next_ += (bytes + 511) / 512 * 512 + 512;
    void* p = reinterpret_cast<void*>(next_);
    live[p] = bytes;
    live_bytes += bytes;
    ++allocations;
    return p;
  }
  void free(void* block) override {
    auto it = live.find(block);
    ASSERT_NE(it, live.end()) << "freeing a block the backing did not hand out";
    live_bytes -= it->second;
    live.erase(it);
    ++frees;
  }
  std::map<void*, std::size_t> live;
  std::size_t live_bytes = 0;
  int64_t allocations = 0, frees = 0;

 private:
  std::size_t capacity_;
  uintptr_t next_ = 1 << 20;
};

const StreamKey kStream1 = reinterpret_cast<StreamKey>(0x10);
const StreamKey kStream2 = reinterpret_cast<StreamKey>(0x20);

TEST(CachingAllocatorCore, SizeClassesRoundUpByAtMostASixteenthOrTwoMiB) {
  EXPECT_EQ(size_class(0), 512u);
  EXPECT_EQ(size_class(1), 512u);
  EXPECT_EQ(size_class(512), 512u);
  EXPECT_EQ(size_class(513), 1024u);
  EXPECT_EQ(size_class(8192), 8192u);
  EXPECT_EQ(size_class(8193), 8192u + 512u);     // granule 8192/16 = 512
  EXPECT_EQ(size_class(16385), 16384u + 1024u);  // granule 1 KiB
  EXPECT_EQ(size_class((1u << 20) + 1), (1u << 20) + (64u << 10));
  const std::size_t gib = std::size_t{1} << 30;
  EXPECT_EQ(size_class(gib + 1), gib + (2u << 20));  // granule capped at 2 MiB
  EXPECT_EQ(size_class(3 * gib), 3 * gib);
  // Every class holds its request, is a multiple of 512, wastes at most 1/16 (or 511 bytes below
  // 8 KiB) and at most 2 MiB, and classes grow with the request: a walk from 1 byte to 16 TiB in
  // steps of up to 1%.
  Rng rng(7);
  std::size_t previous_bytes = 0, previous_class = 0;
  while (previous_bytes < (std::size_t{1} << 44)) {
    const std::size_t bytes =
        previous_bytes + 1 + static_cast<std::size_t>(rng.uniform() * previous_bytes * 0.01);
    const std::size_t cls = size_class(bytes);
    ASSERT_GE(cls, bytes);
    ASSERT_EQ(cls % 512, 0u);
    ASSERT_LE(cls - bytes, std::max<std::size_t>(511, bytes / 16)) << bytes;
    ASSERT_LT(cls - bytes, kMaxGranule) << bytes;
    ASSERT_GE(cls, previous_class);
    previous_bytes = bytes;
    previous_class = cls;
  }
}

TEST(CachingAllocatorCore, AFreedBlockIsReusedByItsClassOnItsStreamOnly) {
  FakeBacking backing;
  CachingAllocator a(backing);
  void* p = a.allocate(1000, kStream1);
  EXPECT_EQ(a.block_bytes(p), 1024u);
  a.free(p);
  EXPECT_EQ(a.block_bytes(p), 0u);      // no longer live
  void* q = a.allocate(900, kStream1);  // same class (1024), same stream: the same block
  EXPECT_EQ(q, p);
  EXPECT_EQ(backing.allocations, 1);
  a.free(q);
  void* other_stream = a.allocate(1000, kStream2);  // another stream: a block of its own
  EXPECT_NE(other_stream, p);
  void* other_class = a.allocate(2000, kStream1);  // another class: a block of its own
  EXPECT_NE(other_class, p);
  EXPECT_EQ(backing.allocations, 3);
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.allocations, 4);
  EXPECT_EQ(s.reuses, 1);
  EXPECT_EQ(s.backing_allocations, 3);
  EXPECT_EQ(s.cached_bytes, 1024u);  // p, waiting on stream 1
  a.free(nullptr);                   // nothing
}

TEST(CachingAllocatorCore, StatsCountInUsePeakCachedAndReserved) {
  FakeBacking backing;
  CachingAllocator a(backing);
  void* x = a.allocate(3000, kStream1);  // class 3072
  void* y = a.allocate(100, kStream1);   // class 512
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.in_use_bytes, 3072u + 512u);
  EXPECT_EQ(s.requested_bytes, 3100u);
  EXPECT_EQ(s.peak_in_use_bytes, 3584u);
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(s.reserved_bytes, 3584u);
  a.free(x);
  s = a.stats();
  EXPECT_EQ(s.in_use_bytes, 512u);
  EXPECT_EQ(s.requested_bytes, 100u);
  EXPECT_EQ(s.peak_in_use_bytes, 3584u);
  EXPECT_EQ(s.cached_bytes, 3072u);
  EXPECT_EQ(s.reserved_bytes, 3584u);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_in_use_bytes, 512u);
  EXPECT_EQ(a.stats().peak_reserved_bytes, 3584u);
  a.release_cached();
  s = a.stats();
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(s.reserved_bytes, 512u);
  EXPECT_EQ(s.backing_frees, 1);
  EXPECT_EQ(backing.live.size(), 1u);  // y is live and stays
  EXPECT_EQ(a.block_bytes(y), 512u);
  a.free(y);
}

// One "training step": a fixed mix of long-lived and short-lived blocks of many sizes on two
// streams, freed in an order unlike their allocation.
void run_step(CachingAllocator& a, uint64_t seed) {
  Rng rng(seed);
  std::vector<void*> live;
  for (int i = 0; i < 400; ++i) {
    const double u = rng.uniform();
    const std::size_t bytes = u < 0.5   ? 1 + static_cast<std::size_t>(u * 20000)
                              : u < 0.9 ? static_cast<std::size_t>(u * (8 << 20))
                                        : static_cast<std::size_t>(u * (300 << 20));
    live.push_back(a.allocate(bytes, rng.uniform() < 0.8 ? kStream1 : kStream2));
    if (rng.uniform() < 0.45 && !live.empty()) {
      const std::size_t k = static_cast<std::size_t>(rng.uniform() * live.size()) % live.size();
      a.free(live[k]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  for (void* p : live) a.free(p);
}

TEST(CachingAllocatorCore, IdenticalStepsAllocateNothingAfterTheFirst) {
  FakeBacking backing;
  CachingAllocator a(backing);
  run_step(a, 11);
  const AllocatorStats first = a.stats();
  EXPECT_GT(first.backing_allocations, 0);
  EXPECT_EQ(first.in_use_bytes, 0u);
  EXPECT_EQ(first.cached_bytes, first.reserved_bytes);
  for (int step = 0; step < 3; ++step) {
    run_step(a, 11);
    const AllocatorStats s = a.stats();
    EXPECT_EQ(s.backing_allocations, first.backing_allocations) << "step " << step + 2;
    EXPECT_EQ(s.reserved_bytes, first.reserved_bytes);
    EXPECT_EQ(s.peak_reserved_bytes, first.peak_reserved_bytes);
    EXPECT_EQ(s.peak_in_use_bytes, first.peak_in_use_bytes);
    EXPECT_EQ(s.reuses, first.allocations * (step + 2) - first.backing_allocations);
  }
  // A step with other sizes does allocate (the check above can fail).
  run_step(a, 12);
  EXPECT_GT(a.stats().backing_allocations, first.backing_allocations);
  a.release_cached();
  EXPECT_EQ(a.stats().reserved_bytes, 0u);
  EXPECT_TRUE(backing.live.empty());
  EXPECT_EQ(backing.frees, backing.allocations);
}

TEST(CachingAllocatorCore, OutOfMemoryGivesTheCacheBackThenThrowsNamingTheSize) {
  FakeBacking backing(10 << 20);  // 10 MiB of "device"
  CachingAllocator a(backing);
  void* big = a.allocate(6 << 20, kStream2);
  a.free(big);  // cached on stream 2
  // 6 MiB cached + 6 MiB asked > 10 MiB: the cache is given back and the request served.
  void* other = a.allocate(6 << 20, kStream1);
  EXPECT_NE(other, nullptr);
  EXPECT_EQ(a.stats().cached_bytes, 0u);
  EXPECT_EQ(a.stats().backing_frees, 1);
  // Nothing cached and no room: Error with the sizes.
  try {
    a.allocate(5 << 20, kStream1);
    FAIL() << "no throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("out of device memory allocating 0.00488"), std::string::npos) << what;
    EXPECT_NE(what.find("GiB in use"), std::string::npos) << what;
  }
  EXPECT_EQ(a.stats().in_use_bytes, std::size_t{6} << 20);  // the failed request left no trace
  a.free(other);
}

TEST(CachingAllocatorCore, ThreadsAllocatingAtOnceKeepTheBooksStraight) {
  FakeBacking backing;
  CachingAllocator a(backing);
  auto work = [&](StreamKey stream, uint64_t seed) {
    Rng rng(seed);
    for (int i = 0; i < 2000; ++i) {
      void* p = a.allocate(1 + static_cast<std::size_t>(rng.uniform() * 50000), stream);
      a.free(p);
    }
  };
  std::thread t1(work, kStream1, 1), t2(work, kStream2, 2);
  t1.join();
  t2.join();
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.allocations, 4000);
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.cached_bytes, s.reserved_bytes);
  EXPECT_EQ(static_cast<int64_t>(backing.live.size()), s.backing_allocations);
}

// A graph capture's pool (kernels/graph.h): the blocks a capture takes are its own, never handed
// to a request outside it, kept by release_cached while the graph lives, and given back with it.
TEST(CachingAllocatorCore, ACapturePoolKeepsItsBlocksFromEveryoneElse) {
  FakeBacking backing;
  CachingAllocator a(backing);
  void* outside = a.allocate(1000, kStream1);
  a.free(outside);  // cached on stream 1
  int pool = 0;
  a.begin_pool(&pool);
  void* captured = a.allocate(1000, kStream1);
  EXPECT_NE(captured, outside) << "a capture took a block of the stream's cache";
  a.free(captured);
  void* again = a.allocate(1000, kStream1);  // inside the capture: its own block again
  EXPECT_EQ(again, captured);
  a.free(again);
  a.end_pool();
  void* after = a.allocate(1000, kStream1);  // outside: the stream's block, never the graph's
  EXPECT_EQ(after, outside);
  void* more = a.allocate(1000, kStream1);
  EXPECT_NE(more, captured);
  a.free(after);
  a.free(more);
  a.release_cached();
  EXPECT_EQ(backing.live.count(captured), 1u) << "release_cached gave back a live graph's block";
  EXPECT_EQ(backing.live.size(), 1u);
  a.release_pool(&pool);
  EXPECT_TRUE(backing.live.empty());
  EXPECT_EQ(a.stats().reserved_bytes, 0u);
}

TEST(CachingAllocatorCoreDeathTest, FreeingAForeignBlockIsABrokenInvariant) {
  FakeBacking backing;
  CachingAllocator a(backing);
  int local = 0;
  EXPECT_DEATH(a.free(&local), "did not hand out");
}

// Host memory behind the core, for Buffer's seam.
class HostBacking final : public BackingAllocator {
 public:
  void* allocate(std::size_t bytes) override {
    ++allocations;
    return ::operator new (bytes, std::align_val_t{512}, std::nothrow);
  }
  void free(void* block) override { ::operator delete (block, std::align_val_t{512}); }
  int64_t allocations = 0;
};
HostBacking g_host_backing;
CachingAllocator* g_host_cache = nullptr;
void* host_cache_allocate(std::size_t bytes) {
  return g_host_cache->allocate(bytes, kStream1);
}
void host_cache_free(void* block) noexcept {
  g_host_cache->free(block);
}

// Buffers allocate through the registered DeviceMemory's allocation, and repeated steps of Buffers
// (created, grown, destroyed) take nothing new from the backing once the first step has run.
TEST(CachingAllocatorCore, BuffersGoThroughTheRegisteredDeviceMemory) {
  CachingAllocator cache(g_host_backing);
  g_host_cache = &cache;
  DeviceMemory seam;
  seam.name = "host cache";
  seam.allocate = host_cache_allocate;
  seam.release = host_cache_free;
  seam.zero = [](void* p, std::size_t bytes) { std::memset(p, 0, bytes); };
  seam.copy = [](void* d, const void* s, std::size_t bytes) { std::memmove(d, s, bytes); };
  seam.download = [](void* h, const void* s, std::size_t bytes) { std::memcpy(h, s, bytes); };
  seam.upload = [](void* d, const void* h, std::size_t bytes) { std::memcpy(d, h, bytes); };
  EXPECT_EQ(registered_device_memory(), nullptr);
  use_device_memory(&seam);
  auto step = [] {
    Buffer<float> weights(1000), activations(100000);
    Buffer<bf16_t> scratch;
    for (std::size_t n : {10u, 5000u, 70000u}) scratch.resize(n);
    activations[5] = 1.0f;
    EXPECT_EQ(weights[999], 0.0f);  // zeroed as a Buffer promises
  };
  step();
  const int64_t after_first = g_host_backing.allocations;
  EXPECT_GT(after_first, 0);
  EXPECT_EQ(cache.stats().in_use_bytes, 0u);
  step();
  step();
  EXPECT_EQ(g_host_backing.allocations, after_first);
  EXPECT_EQ(cache.stats().reuses, 2 * (cache.stats().allocations / 3));
  use_device_memory(nullptr);
  Buffer<float> host(10);  // host memory again, not the cache
  EXPECT_EQ(cache.stats().in_use_bytes, 0u);
  g_host_cache = nullptr;
}

// ---- On a GPU.
using CudaAllocator = testing::DeviceTest;

// The process's device allocator hands out device memory (not managed), reuses it per stream, and
// Buffer's seam reaches it.
TEST_F(CudaAllocator, BlocksAreDeviceMemoryReusedOnTheirStream) {
  CachingAllocator& a = device_allocator();
  const AllocatorStats before = a.stats();
  void* p = a.allocate(123456, stream);
  cudaPointerAttributes attributes{};
  BOOSTLM_CHECK_CUDA(cudaPointerGetAttributes(&attributes, p));
  EXPECT_EQ(attributes.type, cudaMemoryTypeDevice);
  BOOSTLM_CHECK_CUDA(cudaMemsetAsync(p, 0x5a, 123456, stream));
  a.free(p);
  void* q = a.allocate(123000, stream);  // the same class on the same stream: the same block
  EXPECT_EQ(q, p);
  std::vector<unsigned char> host(16);
  BOOSTLM_CHECK_CUDA(cudaMemcpyAsync(host.data(), q, 16, cudaMemcpyDeviceToHost, stream));
  sync();
  EXPECT_EQ(host[7], 0x5a);  // the stream-ordered reuse saw the memset before it
  a.free(q);
  EXPECT_EQ(a.stats().backing_allocations, before.backing_allocations + 1);

  set_buffer_stream(stream);
  install_device_buffers();
  void* b = allocate_buffer(4096);
  BOOSTLM_CHECK_CUDA(cudaPointerGetAttributes(&attributes, b));
  EXPECT_EQ(attributes.type, cudaMemoryTypeDevice);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % kBufferAlignment, 0u);
  free_buffer(b);
  uninstall_device_buffers();
  set_buffer_stream(nullptr);
  sync();
  a.release_cached();
  EXPECT_EQ(a.stats().cached_bytes, 0u);
}

// cudaMalloc's out-of-memory comes back as Error (via the core), not as a sticky CUDA error.
// Not named Cuda*: scripts/device-check.sh runs compute-sanitizer over Cuda* only, and memcheck
// counts the refused cudaMalloc this test provokes as an API error.
using DeviceOutOfMemory = testing::DeviceTest;
TEST_F(DeviceOutOfMemory, IsAnErrorAndLeavesTheDeviceUsable) {
  std::size_t free_bytes = 0, total = 0;
  BOOSTLM_CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total));
  EXPECT_THROW(device_allocator().allocate(total * 2, stream), Error);
  void* p = device_allocator().allocate(1 << 20, stream);
  EXPECT_NE(p, nullptr);
  device_allocator().free(p);
  BOOSTLM_CHECK_CUDA(cudaGetLastError());
}

}  // namespace
}  // namespace boostlm::cuda
