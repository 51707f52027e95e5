// What the CUDA kernels' files share: the grid-stride loop, the dispatch of a row kernel over the
// block sizes it is compiled for (launch.h's kRowBlockSizes), and an element-wise launch of a
// functor over a [rows, cols] domain.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
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

// f(r, j) for every element of a [rows, cols] domain, grid-stride.
template <typename F>
__global__ void elements_2d_kernel(int64_t rows, int64_t cols, F f) {
  const int64_t total = rows * cols;
  for (int64_t e = grid_index(); e < total; e += grid_stride()) {
    const int64_t r = e / cols;
    f(r, e - r * cols);
  }
}

// Launches elements_2d_kernel with f (a functor: nvcc takes no host lambdas into kernels without
// --extended-lambda); `cost` names the functor for the counters (launch_cost.h), since the launch
// expression is the generic kernel's.
template <typename F>
void for_each_element(int64_t rows, int64_t cols, const F& f, const LaunchCost& cost,
                      cudaStream_t stream) {
  const LaunchGeometry g = elements_launch(rows * cols);
  if (g.grid == 0) return;
  BOOSTLM_DECLARE_LAUNCH(cost);
  elements_2d_kernel<<<grid_of(g.grid), g.block, 0, stream>>>(rows, cols, f);
  BOOSTLM_CHECK_LAUNCH();
}

}  // namespace boostlm::cuda
