// The emulated device's cub::WarpReduce (real CUB is PTX and does not compile for the host), with
// CUB's contract made visible: the reduction goes through the TempStorage, in shared memory, and a
// __syncwarp, so reusing the storage without a __syncwarp between two reductions is a race the
// emulator's orders expose; the result is defined in lane 0 only (every other lane gets poison:
// 0xFF bytes, NaN for float). The sum is the tree CUB's shuffle reduction computes (offsets 16, 8,
// 4, 2, 1), so its bits are a GPU's.
#pragma once

#include "cuda_emulator/device_api.h"

namespace cub {

struct Sum {
  template <typename T>
  T operator()(const T& a, const T& b) const {
    return a + b;
  }
};

template <typename T, int LOGICAL_WARP_THREADS = 32, int LEGACY_PTX_ARCH = 0>
class WarpReduce {
  static_assert(LOGICAL_WARP_THREADS >= 1 && LOGICAL_WARP_THREADS <= 32 &&
                    (LOGICAL_WARP_THREADS & (LOGICAL_WARP_THREADS - 1)) == 0,
                "the emulated WarpReduce takes a power-of-two logical warp of at most 32 lanes");

 public:
  // Raw storage (CUB's Uninitialized<>): a __shared__ TempStorage has no constructor to run.
  struct TempStorage {
    alignas(T) unsigned char bytes[sizeof(T) * LOGICAL_WARP_THREADS];
  };

  explicit WarpReduce(TempStorage& storage) : storage_(storage) {}

  T Sum(T input) { return Reduce(input, cub::Sum{}); }

  template <typename ReductionOp>
  T Reduce(T input, ReductionOp op) {
    namespace device = ::cuda_emulator::device;
    const unsigned lane = device::lane_id();
    const unsigned logical_lane = lane % LOGICAL_WARP_THREADS;
    const unsigned first = lane - logical_lane;
    const unsigned mask = LOGICAL_WARP_THREADS == 32
                              ? 0xffffffffu
                              : ((1u << LOGICAL_WARP_THREADS) - 1u) << first;
    T* values = reinterpret_cast<T*>(storage_.bytes);
    values[logical_lane] = input;
    device::sync_warp(mask, __FILE__, __LINE__);
    if (logical_lane != 0) return device::poison<T>();
    T tree[LOGICAL_WARP_THREADS];
    for (int l = 0; l < LOGICAL_WARP_THREADS; ++l) tree[l] = values[l];
    for (int offset = LOGICAL_WARP_THREADS / 2; offset > 0; offset /= 2)
      for (int l = 0; l < offset; ++l) tree[l] = op(tree[l], tree[l + offset]);
    return tree[0];
  }

 private:
  TempStorage& storage_;
};

}  // namespace cub
