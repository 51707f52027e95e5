// The emulated device's cub::BlockReduce (BLOCK_REDUCE_WARP_REDUCTIONS, CUB's default): each warp
// reduces its lanes by shuffles, lane 0 of each warp writes the warp's total into the TempStorage
// (shared memory), a __syncthreads, and thread 0 folds the warp totals in order. CUB's contract is
// kept visible: the result is defined in thread 0 only (every other thread gets poison: 0xFF
// bytes, NaN for float and double), the block must have the template's dimensions, and reusing the
// TempStorage without a __syncthreads between two reductions races (thread 0 may still be reading
// the warp totals that the next reduction overwrites).
#pragma once

#include "cub/warp/warp_reduce.cuh"
#include "cuda_emulator/device_api.h"

namespace cub {

enum BlockReduceAlgorithm {
  BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY,
  BLOCK_REDUCE_RAKING,
  BLOCK_REDUCE_WARP_REDUCTIONS,
};

template <typename T, int BLOCK_DIM_X, BlockReduceAlgorithm ALGORITHM = BLOCK_REDUCE_WARP_REDUCTIONS,
          int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1, int LEGACY_PTX_ARCH = 0>
class BlockReduce {
  static constexpr int kThreads = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;
  static constexpr int kWarps = (kThreads + 31) / 32;

 public:
  struct TempStorage {
    alignas(T) unsigned char bytes[sizeof(T) * kWarps];
  };

  explicit BlockReduce(TempStorage& storage) : storage_(storage) {}

  T Sum(T input) { return Reduce(input, cub::Sum{}); }

  template <typename ReductionOp>
  T Reduce(T input, ReductionOp op) {
    namespace device = ::cuda_emulator::device;
    const dim3 block = device::builtins.block_dim;
    if (static_cast<int>(block.x) != BLOCK_DIM_X || static_cast<int>(block.y) != BLOCK_DIM_Y ||
        static_cast<int>(block.z) != BLOCK_DIM_Z)
      device::device_fault("cub::BlockReduce used in a block whose dimensions are not its "
                           "template's BLOCK_DIM_X, BLOCK_DIM_Y, BLOCK_DIM_Z");
    const int thread = static_cast<int>(device::builtins.linear_thread);
    const int warp = thread / 32, lane = thread % 32;
    const int lanes = warp == kWarps - 1 ? kThreads - 32 * warp : 32;
    const unsigned mask = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
    T value = input;
    for (int offset = 16; offset > 0; offset /= 2) {
      const int source = lane + offset < lanes ? lane + offset : -1;
      const T other = device::shuffle_any(mask, value, source, "cub::BlockReduce (warp shuffle)",
                                          __FILE__, __LINE__);
      if (source >= 0) value = op(value, other);
    }
    T* warp_totals = reinterpret_cast<T*>(storage_.bytes);
    if (lane == 0) warp_totals[warp] = value;
    device::sync_block(__FILE__, __LINE__);
    if (thread != 0) return device::poison<T>();
    T total = warp_totals[0];
    for (int w = 1; w < kWarps; ++w) total = op(total, warp_totals[w]);
    return total;
  }

 private:
  TempStorage& storage_;
};

}  // namespace cub
