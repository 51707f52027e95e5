// The caching device allocator's core: pure host code over an abstract backing allocator
// (cudaMalloc on a GPU, device_allocator.h; a fake in the host tests), so every rule below is
// tested without a GPU.
//
// cudaMalloc and cudaFree are slow and cudaFree synchronises the device, so a training step must
// not call them: blocks freed by the engine are kept, per stream and size class, and handed out
// again to the next request of that class on that stream (PyTorch's CUDACachingAllocator and
// llm.c's single up-front allocation answer the same problem; this is the simplest form that gives
// the guarantee below).
//
//  - Size classes: a request is rounded up to a multiple of its granule, the largest power of two
//    at most 1/16 of the request, clamped to [512 B, 2 MiB] (cudaMalloc's own granularity for large
//    blocks). At most 1/16 (6.25%) or 2 MiB is wasted per block, whichever is less.
//  - A freed block is cached on the free list of (the stream it was allocated for, its class) and
//    reused only by a request of the same class on the same stream. Work on one stream runs in
//    order, so the next user's kernels run after the previous user's without any synchronisation.
//    A block used on another stream must be ordered back to its own stream (an event) before it is
//    freed; the caller owns that rule, as with PyTorch's record_stream.
//  - No growth across identical steps: with exact-class reuse, the blocks of class c ever taken
//    from the backing are the most blocks of class c live at once. A step that repeats the previous
//    one's requests (same sizes, same order of allocation and free) therefore finds every block in
//    the cache and allocates nothing.
//  - When the backing is out of memory, every cached block (every stream) is given back and the
//    request tried once more; then it throws Error with the sizes.
//
// Thread-safe (one mutex): the TP overlap's progress thread allocates beside the main thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace boostlm::cuda {

// Where the blocks come from. allocate returns nullptr when out of memory (any other failure
// throws); free takes a block allocate returned.
class BackingAllocator {
 public:
  virtual ~BackingAllocator() = default;
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void free(void* block) = 0;
};

// A stream as the allocator sees it: an opaque key (a cudaStream_t's value), so this header needs
// no CUDA.
using StreamKey = const void*;

inline constexpr std::size_t kMinGranule = 512;
inline constexpr std::size_t kMaxGranule = std::size_t{2} << 20;
inline constexpr std::size_t kGranuleFraction = 16;
// The bytes a request of `bytes` takes (its size class); 0 takes the smallest class.
std::size_t size_class(std::size_t bytes);

struct AllocatorStats {
  std::size_t in_use_bytes = 0;     // the classes of the live blocks
  std::size_t requested_bytes = 0;  // what the live blocks were asked for
  std::size_t peak_in_use_bytes = 0;
  std::size_t cached_bytes = 0;    // free blocks held for reuse
  std::size_t reserved_bytes = 0;  // taken from the backing and not given back: in use + cached
  std::size_t peak_reserved_bytes = 0;
  int64_t allocations = 0;          // requests served
  int64_t reuses = 0;               // ... of which from the cache
  int64_t backing_allocations = 0;  // blocks taken from the backing
  int64_t backing_frees = 0;        // blocks given back to it
};

class CachingAllocator {
 public:
  explicit CachingAllocator(BackingAllocator& backing) : backing_(backing) {}
  // Gives the cached blocks back; blocks still live are left to the backing's owner (at exit the
  // CUDA context may already be gone).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` for use on `stream`, aligned as the backing aligns.
  void* allocate(std::size_t bytes, StreamKey stream);
  // Back to the cache of the stream it was allocated for; nullptr: nothing. A block this allocator
  // did not hand out is a broken invariant (assertion).
  void free(void* block);
  // Gives every cached block back to the backing (on a GPU: cudaFree, which waits for the device).
  // Live blocks stay.
  void release_cached();

  // A graph capture's pool (kernels/graph.h): from begin_pool to end_pool every request takes its
  // block from, and frees it to, the free list of `pool` instead of its stream's, so that the
  // blocks a graph uses are never handed to work outside it between its replays (PyTorch's graph
  // memory pools answer the same problem). What the pool lacks comes from the backing during the
  // capture (on a GPU in relaxed capture mode: the allocation is not part of the graph). The
  // pool's blocks stay reserved, release_cached included, until release_pool (the graph is gone).
  void begin_pool(StreamKey pool);
  void end_pool();
  void release_pool(StreamKey pool);

  AllocatorStats stats() const;
  void reset_peak();  // the peaks start again from what is in use / reserved now
  // The class bytes of a live block (0: not a live block of this allocator).
  std::size_t block_bytes(const void* block) const;

 private:
  struct Live {
    std::size_t bytes, requested;
    StreamKey stream;
  };
  using FreeKey = std::pair<StreamKey, std::size_t>;  // (stream, class)
  void release_cached_locked();
  void give_back_locked(const std::vector<void*>& blocks, std::size_t bytes);  // to the backing

  BackingAllocator& backing_;
  mutable std::mutex mutex_;
  std::unordered_map<const void*, Live> live_;
  std::map<FreeKey, std::vector<void*>> free_;
  StreamKey pool_ = nullptr;          // capturing into this pool now
  std::vector<StreamKey> held_pools_;  // pools of live graphs
  AllocatorStats stats_;
};

}  // namespace boostlm::cuda
