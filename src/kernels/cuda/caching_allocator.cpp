#include "kernels/cuda/caching_allocator.h"

#include <algorithm>
#include <bit>

#include "core/error.h"

namespace boostlm::cuda {

namespace {
double gib(std::size_t bytes) {
  return static_cast<double>(bytes) / (1 << 30);
}
}  // namespace

std::size_t size_class(std::size_t bytes) {
  const std::size_t granule = std::clamp(
      std::bit_floor(std::max<std::size_t>(bytes, 1)) / kGranuleFraction, kMinGranule, kMaxGranule);
  if (bytes == 0) return granule;
  BOOSTLM_ASSERT_MSG(bytes <= SIZE_MAX - granule, "allocation size overflows");
  return (bytes + granule - 1) / granule * granule;
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

void* CachingAllocator::allocate(std::size_t bytes, StreamKey stream) {
  const std::size_t cls = size_class(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  if (pool_) stream = pool_;
  void* block = nullptr;
  auto it = free_.find({stream, cls});
  if (it != free_.end() && !it->second.empty()) {
    block = it->second.back();
    it->second.pop_back();
    stats_.cached_bytes -= cls;
    ++stats_.reuses;
  } else {
    block = backing_.allocate(cls);
    if (block == nullptr && stats_.cached_bytes > 0) {
      // Cached blocks of other classes or streams may be what stands in the way.
      release_cached_locked();
      block = backing_.allocate(cls);
    }
    if (block == nullptr)
      throw error("out of device memory allocating ", gib(cls), " GiB (", gib(stats_.in_use_bytes),
                  " GiB in use, nothing cached left): a smaller model or batch, or more ranks, "
                  "would fit");
    ++stats_.backing_allocations;
    stats_.reserved_bytes += cls;
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  }
  live_.emplace(block, Live{cls, bytes, stream});
  ++stats_.allocations;
  stats_.in_use_bytes += cls;
  stats_.requested_bytes += bytes;
  stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
  return block;
}

void CachingAllocator::free(void* block) {
  if (block == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(block);
  BOOSTLM_ASSERT_MSG(it != live_.end(), "freeing a block the caching allocator did not hand out");
  const Live live = it->second;
  live_.erase(it);
  free_[{live.stream, live.bytes}].push_back(block);
  stats_.in_use_bytes -= live.bytes;
  stats_.requested_bytes -= live.requested;
  stats_.cached_bytes += live.bytes;
}

void CachingAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

void CachingAllocator::release_cached_locked() {
  for (auto it = free_.begin(); it != free_.end();) {
    const auto& [key, blocks] = *it;
    if (std::find(held_pools_.begin(), held_pools_.end(), key.first) != held_pools_.end()) {
      ++it;  // a live graph's blocks
      continue;
    }
    give_back_locked(blocks, key.second);
    it = free_.erase(it);
  }
}

void CachingAllocator::give_back_locked(const std::vector<void*>& blocks, std::size_t bytes) {
  for (void* block : blocks) {
    backing_.free(block);
    ++stats_.backing_frees;
    stats_.reserved_bytes -= bytes;
    stats_.cached_bytes -= bytes;
  }
}

void CachingAllocator::begin_pool(StreamKey pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  BOOSTLM_ASSERT_MSG(pool && !pool_, "one capture pool at a time");
  pool_ = pool;
  held_pools_.push_back(pool);
}

void CachingAllocator::end_pool() {
  std::lock_guard<std::mutex> lock(mutex_);
  pool_ = nullptr;
}

void CachingAllocator::release_pool(StreamKey pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  held_pools_.erase(std::remove(held_pools_.begin(), held_pools_.end(), pool), held_pools_.end());
  for (auto it = free_.begin(); it != free_.end();) {
    if (it->first.first != pool) {
      ++it;
      continue;
    }
    give_back_locked(it->second, it->first.second);
    it = free_.erase(it);
  }
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_in_use_bytes = stats_.in_use_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

std::size_t CachingAllocator::block_bytes(const void* block) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(block);
  return it == live_.end() ? 0 : it->second.bytes;
}

}  // namespace boostlm::cuda
