// The parts of CUB the emulated device provides (see block/block_reduce.cuh, warp/warp_reduce.cuh).
#pragma once

#include "cub/block/block_reduce.cuh"
#include "cub/warp/warp_reduce.cuh"
