// The device side of the emulated CUDA device, force-included (-include) into every .cu file that
// the EMULATE build compiles with the host compiler (after rewrite_launch.py has turned its
// launches and __shared__ declarations into calls). What nvcc provides implicitly lives here: the
// runtime header, the index variables, the execution-space keywords, barriers, warp shuffles,
// atomics and the device math intrinsics the kernels use.
#pragma once

#include <cuda_runtime.h>  // nvcc includes it into every .cu file

#include <cassert>
#include <cmath>
#include <cstdint>

#include "cuda_emulator/device_api.h"
#include "cuda_emulator/launch.h"

// cuda_runtime.h, compiled without nvcc, already defines __host__, __device__, __global__,
// __shared__ (the rewriter removes it), __forceinline__ and __align__; these it leaves to nvcc.
#define __launch_bounds__(...)
#define __noinline__ __attribute__((noinline))

// The built-in variables, read-only as on a GPU.
#define threadIdx (static_cast<const uint3&>(::cuda_emulator::device::builtins.thread_idx))
#define blockIdx (static_cast<const uint3&>(::cuda_emulator::device::builtins.block_idx))
#define blockDim (static_cast<const dim3&>(::cuda_emulator::device::builtins.block_dim))
#define gridDim (static_cast<const dim3&>(::cuda_emulator::device::builtins.grid_dim))
#ifndef warpSize
#define warpSize 32
#endif

// Barriers carry their call site: threads of a block waiting at different __syncthreads are a
// fault (undefined on a GPU).
#define __syncthreads() ::cuda_emulator::device::sync_block(__FILE__, __LINE__)
#define __syncwarp(...) \
  ::cuda_emulator::device::syncwarp_at(__FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__)
#define __shfl_sync(...) ::cuda_emulator::device::shfl_at(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) ::cuda_emulator::device::shfl_up_at(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) \
  ::cuda_emulator::device::shfl_down_at(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) ::cuda_emulator::device::shfl_xor_at(__FILE__, __LINE__, __VA_ARGS__)

namespace cuda_emulator::device {

inline void syncwarp_at(const char* file, int line, unsigned mask = 0xffffffffu) {
  sync_warp(mask, file, line);
}

// The types the shuffle intrinsics take (CUDA's overloads; bf16 and half through their 16 bits).
template <typename T>
concept Shufflable = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;

// The source lane of a shuffle within the lane's segment of `width` lanes, or -1 (own value).
inline int segment_source(int lane, int width, int offset_in_segment) {
  return (lane & ~(width - 1)) + (offset_in_segment & (width - 1));
}

template <Shufflable T>
T shfl_at(const char* file, int line, unsigned mask, T var, int source_lane, int width = 32) {
  const int lane = static_cast<int>(lane_id());
  return shuffle_any(mask, var, segment_source(lane, width, source_lane), "__shfl_sync", file,
                     line);
}

template <Shufflable T>
T shfl_down_at(const char* file, int line, unsigned mask, T var, unsigned delta, int width = 32) {
  const int lane = static_cast<int>(lane_id());
  const int in_segment = lane & (width - 1);
  const int source = in_segment + static_cast<int>(delta) < width ? lane + static_cast<int>(delta)
                                                                   : -1;
  return shuffle_any(mask, var, source, "__shfl_down_sync", file, line);
}

template <Shufflable T>
T shfl_up_at(const char* file, int line, unsigned mask, T var, unsigned delta, int width = 32) {
  const int lane = static_cast<int>(lane_id());
  const int in_segment = lane & (width - 1);
  const int source = in_segment >= static_cast<int>(delta) ? lane - static_cast<int>(delta) : -1;
  return shuffle_any(mask, var, source, "__shfl_up_sync", file, line);
}

template <Shufflable T>
T shfl_xor_at(const char* file, int line, unsigned mask, T var, int lane_mask, int width = 32) {
  const int lane = static_cast<int>(lane_id());
  const int source = lane ^ lane_mask;
  const bool inside = source / width == lane / width && source < kWarpSize;
  return shuffle_any(mask, var, inside ? source : -1, "__shfl_xor_sync", file, line);
}

}  // namespace cuda_emulator::device

// Atomics: the threads of the emulated device run one at a time on one host thread, and a
// device thread is never interrupted between two barriers, so a plain read-modify-write is
// atomic here.
template <typename T>
inline T atomicAdd(T* address, T value) {
  const T old = *address;
  *address = old + value;
  return old;
}
template <typename T>
inline T atomicSub(T* address, T value) {
  const T old = *address;
  *address = old - value;
  return old;
}
template <typename T>
inline T atomicMax(T* address, T value) {
  const T old = *address;
  *address = old < value ? value : old;
  return old;
}
template <typename T>
inline T atomicMin(T* address, T value) {
  const T old = *address;
  *address = value < old ? value : old;
  return old;
}
template <typename T>
inline T atomicExch(T* address, T value) {
  const T old = *address;
  *address = value;
  return old;
}
template <typename T>
inline T atomicCAS(T* address, T compare, T value) {
  const T old = *address;
  if (old == compare) *address = value;
  return old;
}

// Memory fences: every device thread runs on one host thread, whose order is program order.
inline void __threadfence() {}
inline void __threadfence_block() {}

template <typename T>
inline T __ldg(const T* address) {
  return *address;
}

// The fast-math intrinsics, at full precision (a GPU's are less precise: tests comparing with the
// CPU must state tolerances that hold on both).
inline float __expf(float x) {
  return expf(x);
}
inline float __logf(float x) {
  return logf(x);
}
inline float __powf(float x, float y) {
  return powf(x, y);
}
inline float __sinf(float x) {
  return sinf(x);
}
inline float __cosf(float x) {
  return cosf(x);
}
inline float __tanhf(float x) {
  return tanhf(x);
}
inline float __fdividef(float x, float y) {
  return x / y;
}
inline float __frcp_rn(float x) {
  return 1.0f / x;
}
inline float __fsqrt_rn(float x) {
  return sqrtf(x);
}
inline float rsqrtf(float x) {
  return 1.0f / sqrtf(x);
}
inline double rsqrt(double x) {
  return 1.0 / sqrt(x);
}
inline float __saturatef(float x) {
  return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x);
}
inline float __fmaf_rn(float a, float b, float c) {
  return fmaf(a, b, c);
}
inline float __fadd_rn(float a, float b) {
  return a + b;
}
inline float __fmul_rn(float a, float b) {
  return a * b;
}
