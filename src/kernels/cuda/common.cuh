// What the CUDA kernels' files share: the grid-stride loop and the dispatch of a row kernel over
// the block sizes it is compiled for (launch.h's kRowBlockSizes).
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/error.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/launch_cost.h"

namespace boostlm::cuda {

// The first index and the stride of a grid-stride loop over a 1-D grid, in 64 bits.
__device__ inline int64_t grid_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t grid_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// Calls f(std::integral_constant<int, B>{}) for the block size B == block of kRowBlockSizes.
template <typename F>
void with_row_block(int block, F&& f) {
  switch (block) {
    case 128:
      f(std::integral_constant<int, 128>{});
      return;
    case 256:
      f(std::integral_constant<int, 256>{});
      return;
    case 512:
      f(std::integral_constant<int, 512>{});
      return;
    case 1024:
      f(std::integral_constant<int, 1024>{});
      return;
  }
  BOOSTLM_ASSERT_MSG(false, "a row kernel is not compiled for this block size");
}

inline dim3 grid_of(int64_t blocks) {
  return dim3(static_cast<unsigned>(blocks));
}

}  // namespace boostlm::cuda
