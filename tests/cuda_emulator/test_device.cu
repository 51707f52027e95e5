// The emulated CUDA device's own tests (BOOSTLM_CUDA=EMULATE; rewritten and compiled like the
// backend's .cu files): the execution model, and deliberately broken kernels that a GPU may run
// "correctly" by luck but the emulator must catch, either as a fault (EXPECT_DEATH) or as a
// result that depends on the thread order (the same kernel run forward and in reverse).
#include <cub/block/block_reduce.cuh>
#include <cub/warp/warp_reduce.cuh>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cuda_emulator/emulator.h"

namespace {

#define CHECK_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

constexpr int kBlock = 256;

// Runs `launch` in the forward and in the reverse thread order and returns both results.
template <typename Launch>
std::pair<std::vector<float>, std::vector<float>> in_two_orders(int n, Launch launch) {
  std::vector<float> results[2];
  const char* orders[2] = {"forward", "reverse"};
  for (int o = 0; o < 2; ++o) {
    cuda_emulator::set_order(orders[o]);
    float* out = nullptr;
    EXPECT_EQ(cudaMalloc(&out, n * sizeof(float)), cudaSuccess);
    launch(out);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    results[o].resize(n);
    EXPECT_EQ(cudaMemcpy(results[o].data(), out, n * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    cudaFree(out);
  }
  cuda_emulator::set_order("forward");
  return {results[0], results[1]};
}

bool is_poison(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits == 0xFFFFFFFFu;
}

// ---- A shared-memory tree reduction, with its barriers and without the one in the loop.

__global__ void tree_sum_kernel(float* out, bool synchronise) {
  __shared__ float partial[kBlock];
  const int t = threadIdx.x;
  partial[t] = static_cast<float>(t + 1);
  __syncthreads();
  for (int stride = kBlock / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    if (synchronise) __syncthreads();
  }
  if (t == 0) out[0] = partial[0];
}

TEST(EmulatedDevice, TreeReductionWithBarriersIsTheSameInEveryOrder) {
  const auto [forward, reverse] =
      in_two_orders(1, [](float* out) { tree_sum_kernel<<<1, kBlock>>>(out, true); });
  EXPECT_EQ(forward[0], kBlock * (kBlock + 1) / 2);
  EXPECT_EQ(reverse[0], forward[0]);
}

TEST(EmulatedDevice, RemovedSyncthreadsIsARaceTheOrdersShow) {
  const auto [forward, reverse] =
      in_two_orders(1, [](float* out) { tree_sum_kernel<<<1, kBlock>>>(out, false); });
  EXPECT_NE(forward[0], reverse[0]) << "a race without its barrier must depend on the order";
}

// ---- Two warp reductions through one TempStorage, with and without the __syncwarp CUB asks for.

__global__ void two_warp_sums_kernel(float* out, bool synchronise) {
  using WarpReduce = cub::WarpReduce<float>;
  __shared__ WarpReduce::TempStorage temp;
  const float lane = static_cast<float>(threadIdx.x);
  const float first = WarpReduce(temp).Sum(lane);
  if (synchronise) __syncwarp();
  const float second = WarpReduce(temp).Sum(2 * lane);
  if (threadIdx.x == 0) {
    out[0] = first;
    out[1] = second;
  }
}

TEST(EmulatedDevice, WarpReduceReusedAfterSyncwarpIsTheSameInEveryOrder) {
  const auto [forward, reverse] =
      in_two_orders(2, [](float* out) { two_warp_sums_kernel<<<1, 32>>>(out, true); });
  EXPECT_EQ(forward, (std::vector<float>{496, 992}));
  EXPECT_EQ(reverse, forward);
}

TEST(EmulatedDevice, RemovedSyncwarpIsARaceTheOrdersShow) {
  const auto [forward, reverse] =
      in_two_orders(2, [](float* out) { two_warp_sums_kernel<<<1, 32>>>(out, false); });
  EXPECT_NE(forward, reverse) << "reusing TempStorage without __syncwarp must depend on the order";
}

// ---- CUB's BlockReduce: the result is defined in thread 0 only.

__global__ void block_sum_kernel(float* out, bool broadcast) {
  using Reduce = cub::BlockReduce<float, kBlock>;
  __shared__ typename Reduce::TempStorage temp;
  __shared__ float total;
  const float sum = Reduce(temp).Sum(1.0f);
  if (!broadcast) {
    out[threadIdx.x] = sum;  // wrong: only thread 0 holds the sum
    return;
  }
  if (threadIdx.x == 0) total = sum;
  __syncthreads();
  out[threadIdx.x] = total;
}

TEST(EmulatedDevice, BlockReduceBroadcastThroughSharedMemoryReachesEveryThread) {
  const auto [forward, reverse] =
      in_two_orders(kBlock, [](float* out) { block_sum_kernel<<<1, kBlock>>>(out, true); });
  EXPECT_EQ(forward, std::vector<float>(kBlock, kBlock));
  EXPECT_EQ(reverse, forward);
}

TEST(EmulatedDevice, BlockReduceResultReadOutsideThreadZeroIsPoison) {
  const auto [forward, reverse] =
      in_two_orders(kBlock, [](float* out) { block_sum_kernel<<<1, kBlock>>>(out, false); });
  EXPECT_EQ(forward[0], kBlock);
  for (int t = 1; t < kBlock; ++t) EXPECT_TRUE(is_poison(forward[t])) << t;
}

// ---- Barriers not every thread reaches: faults.

__global__ void early_exit_kernel(float* out) {
  if (threadIdx.x == 5) return;
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

__global__ void divergent_barriers_kernel(float* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1.0f;
}

__global__ void warp_barrier_missing_lane_kernel(float* out) {
  if (threadIdx.x == 7) return;
  __syncwarp();
  out[threadIdx.x] = 1.0f;
}

__global__ void deadlock_kernel(float* out) {
  if (threadIdx.x < 32)
    __syncwarp();  // warp 0 waits for itself: fine
  if (threadIdx.x == 40)
    __syncwarp(0x3u << 8);  // lanes 8 and 9 of warp 1: lane 9 goes to __syncthreads instead
  else
    __syncthreads();
  out[threadIdx.x] = 1.0f;
}

class EmulatedDeviceDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(EmulatedDeviceDeathTest, ExitBeforeABarrierIsAFault) {
  EXPECT_DEATH(
      {
        float* out = nullptr;
        cudaMalloc(&out, 64 * sizeof(float));
        early_exit_kernel<<<1, 64>>>(out);
        cudaDeviceSynchronize();
      },
      "exited.*__syncthreads.*kernel early_exit_kernel.*block \\(0,0,0\\)");
}

TEST_F(EmulatedDeviceDeathTest, DifferentSyncthreadsAreAFault) {
  EXPECT_DEATH(
      {
        float* out = nullptr;
        cudaMalloc(&out, 32 * sizeof(float));
        divergent_barriers_kernel<<<1, 32>>>(out);
        cudaDeviceSynchronize();
      },
      "different __syncthreads");
}

TEST_F(EmulatedDeviceDeathTest, SyncwarpALaneDoesNotReachIsAFault) {
  EXPECT_DEATH(
      {
        float* out = nullptr;
        cudaMalloc(&out, 32 * sizeof(float));
        warp_barrier_missing_lane_kernel<<<1, 32>>>(out);
        cudaDeviceSynchronize();
      },
      "lane (7 of the mask has exited|exited while lane)");
}

TEST_F(EmulatedDeviceDeathTest, DeadlockNamesTheKernelAndTheWaitingThreads) {
  EXPECT_DEATH(
      {
        float* out = nullptr;
        cudaMalloc(&out, 64 * sizeof(float));
        deadlock_kernel<<<1, 64>>>(out);
        cudaDeviceSynchronize();
      },
      "deadlock.*threads at __syncthreads.*at warp barriers.*kernel deadlock_kernel");
}

// ---- Device assert.

__global__ void assert_kernel(float* out) {
  assert(threadIdx.x != 3);
  out[threadIdx.x] = 1.0f;
}

TEST_F(EmulatedDeviceDeathTest, DeviceAssertNamesKernelBlockAndThread) {
  EXPECT_DEATH(
      {
        float* out = nullptr;
        cudaMalloc(&out, 8 * sizeof(float));
        assert_kernel<<<2, 8>>>(out);
        cudaDeviceSynchronize();
      },
      "threadIdx.x != 3.*device code aborted.*kernel assert_kernel.*block \\(0,0,0\\), thread "
      "\\(3,0,0\\)");
}

// ---- Memory: out of bounds, host dereference, poison.

__global__ void write_at_kernel(float* p, int index) {
  p[index] = 1.0f;
}

TEST_F(EmulatedDeviceDeathTest, KernelWritePastAnAllocationFaults) {
  EXPECT_DEATH(
      {
        float* p = nullptr;
        cudaMalloc(&p, 64 * sizeof(float));  // 256 bytes: its end is the guard page
        write_at_kernel<<<1, 1>>>(p, 64);
        cudaDeviceSynchronize();
      },
      "out-of-bounds device access by kernel write_at_kernel.*0 bytes past the end of the device "
      "allocation of 256 bytes");
}

TEST_F(EmulatedDeviceDeathTest, KernelWriteIntoTheSlackAfterAnAllocationIsCaught) {
  EXPECT_DEATH(
      {
        float* p = nullptr;
        cudaMalloc(&p, 10 * sizeof(float));  // 40 bytes: 216 bytes of canary before the guard
        write_at_kernel<<<1, 1>>>(p, 12);
        cudaDeviceSynchronize();
      },
      "kernel write_at_kernel.*wrote out of bounds of the device allocation of 40 bytes");
}

// Device work opens an allocation at its first access to it (the fault handler), not every live
// one before it runs: an allocation the kernel already opened still ends at its guard page.
__global__ void write_first_and_at_kernel(float* p, int index) {
  p[0] = 1.0f;
  p[index] = 1.0f;
}

TEST_F(EmulatedDeviceDeathTest, KernelWritePastAnAllocationItOpenedFaults) {
  EXPECT_DEATH(
      {
        float* p = nullptr;
        cudaMalloc(&p, 64 * sizeof(float));
        write_first_and_at_kernel<<<1, 1>>>(p, 64);
        cudaDeviceSynchronize();
      },
      "out-of-bounds device access by kernel write_first_and_at_kernel.*0 bytes past the end of "
      "the device allocation of 256 bytes");
}

// And closes what it opened when it is over: the host's access after a kernel wrote there faults,
// as does a host function's between two kernels.
TEST_F(EmulatedDeviceDeathTest, HostDereferenceAfterAKernelTouchedTheAllocationFaults) {
  EXPECT_DEATH(
      {
        float* p = nullptr;
        cudaMalloc(&p, 16 * sizeof(float));
        write_at_kernel<<<1, 1>>>(p, 3);
        cudaDeviceSynchronize();
        static_cast<volatile float*>(p)[3] = 1.0f;
      },
      "the host dereferenced device memory.*byte 12 of the device allocation of 64 bytes");
}

void read_device_value(void* p) {
  (void)static_cast<volatile float*>(p)[1];
}

TEST_F(EmulatedDeviceDeathTest, HostFunctionBetweenKernelsCannotReachWhatTheyTouch) {
  EXPECT_DEATH(
      {
        float* p = nullptr;
        cudaMalloc(&p, 16 * sizeof(float));
        write_at_kernel<<<1, 1>>>(p, 1);
        cudaLaunchHostFunc(nullptr, read_device_value, p);
        write_at_kernel<<<1, 1>>>(p, 2);
        cudaDeviceSynchronize();
      },
      "the host dereferenced device memory.*byte 4 of the device allocation of 64 bytes");
}

TEST_F(EmulatedDeviceDeathTest, HostDereferenceOfDeviceMemoryFaults) {
  EXPECT_DEATH(
      {
        float* p = nullptr;
        cudaMalloc(&p, 16 * sizeof(float));
        static_cast<volatile float*>(p)[3] = 1.0f;
      },
      "the host dereferenced device memory.*byte 12 of the device allocation of 64 bytes");
}

__global__ void read_unwritten_shared_kernel(float* out) {
  __shared__ float never_written[4];
  out[threadIdx.x] = never_written[threadIdx.x];
}

TEST(EmulatedDevice, FreshDeviceAndSharedMemoryArePoison) {
  float* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, 4 * sizeof(float)));
  std::vector<float> host(4, 0.0f);
  CHECK_CUDA(cudaMemcpy(host.data(), p, 16, cudaMemcpyDeviceToHost));
  for (float x : host) EXPECT_TRUE(is_poison(x));
  read_unwritten_shared_kernel<<<1, 4>>>(p);
  CHECK_CUDA(cudaMemcpy(host.data(), p, 16, cudaMemcpyDeviceToHost));
  for (float x : host) EXPECT_TRUE(std::isnan(x) && is_poison(x));
  CHECK_CUDA(cudaFree(p));
}

// ---- Launch limits, as cudaGetLastError reports them.

__global__ void empty_kernel() {}

TEST(EmulatedDevice, LaunchLimitsAreEnforced) {
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  empty_kernel<<<1, 1024>>>();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  struct Bad {
    dim3 grid, block;
  };
  const Bad bad[] = {{dim3(1), dim3(1025)},         {dim3(1), dim3(32, 33)},
                     {dim3(1), dim3(1, 1, 65)},     {dim3(1), dim3(0)},
                     {dim3(0), dim3(32)},           {dim3(1, 65536), dim3(32)},
                     {dim3(1, 1, 65536), dim3(32)}, {dim3(1), dim3(1, 1025)},
                     {dim3(2147483648u), dim3(1)}};
  for (const Bad& b : bad) {
    empty_kernel<<<b.grid, b.block>>>();
    EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidConfiguration)
        << b.grid.x << "," << b.grid.y << "," << b.grid.z << " x " << b.block.x << ","
        << b.block.y << "," << b.block.z;
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // read and reset
  }
  CHECK_CUDA(cudaDeviceSynchronize());
}

// ---- Shared-memory limits (sm_90: 48 KiB by default, up to 227 KiB with the attribute).

__global__ void dynamic_shared_kernel(float* out, int n) {
  extern __shared__ float dynamic[];
  dynamic[n - 1] = 2.0f;  // the last element of the request
  __syncthreads();
  out[0] = dynamic[n - 1];
}

__global__ void static_shared_kernel(float* out) {
  __shared__ float table[10 * 1024];  // 40 KiB
  extern __shared__ float dynamic[];
  table[threadIdx.x] = 1.0f;
  dynamic[0] = table[threadIdx.x];
  out[0] = dynamic[0];
}

TEST(EmulatedDevice, DynamicSharedMemoryLimitWithAndWithoutTheAttribute) {
  float* out = nullptr;
  CHECK_CUDA(cudaMalloc(&out, sizeof(float)));
  dynamic_shared_kernel<<<1, 1, 48 * 1024>>>(out, 12 * 1024);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  dynamic_shared_kernel<<<1, 1, 48 * 1024 + 4>>>(out, 12 * 1024 + 1);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFuncSetAttribute(dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 232448 + 4),
            cudaErrorInvalidValue);
  cudaGetLastError();
  CHECK_CUDA(cudaFuncSetAttribute(dynamic_shared_kernel,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, 232448));
  dynamic_shared_kernel<<<1, 1, 232448>>>(out, 232448 / 4);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  dynamic_shared_kernel<<<1, 1, 232448 + 4>>>(out, 232448 / 4 + 1);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  float value = 0;
  CHECK_CUDA(cudaMemcpy(&value, out, sizeof value, cudaMemcpyDeviceToHost));
  EXPECT_EQ(value, 2.0f);
  CHECK_CUDA(cudaFree(out));
}

TEST_F(EmulatedDeviceDeathTest, StaticAndDynamicSharedMemoryBeyond48KiBFault) {
  EXPECT_DEATH(
      {
        float* out = nullptr;
        cudaMalloc(&out, sizeof(float));
        static_shared_kernel<<<1, 32, 16 * 1024>>>(out);  // 40 + 16 KiB
        cudaDeviceSynchronize();
      },
      "static shared memory of 40960 bytes and dynamic of 16384 bytes exceed the default 49152");
}

TEST(EmulatedDevice, StaticSharedMemoryMeasuredOnceIsCheckedAtTheLaunch) {
  float* out = nullptr;
  CHECK_CUDA(cudaMalloc(&out, sizeof(float)));
  static_shared_kernel<<<1, 32, 1024>>>(out);  // 41 KiB: fine, and measures the static part
  CHECK_CUDA(cudaDeviceSynchronize());
  static_shared_kernel<<<1, 32, 16 * 1024>>>(out);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  CHECK_CUDA(cudaFree(out));
}

// ---- The runtime's checks of copies and frees.

TEST(EmulatedDevice, CopiesWhosePointersDoNotMatchTheirKindAreRefused) {
  float* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, 16 * sizeof(float)));
  std::vector<float> h(16, 1.0f);
  CHECK_CUDA(cudaMemcpy(d, h.data(), 64, cudaMemcpyHostToDevice));
  EXPECT_EQ(cudaMemcpy(h.data(), d, 64, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 64, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 64, cudaMemcpyDeviceToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(h.data(), d, 64, cudaMemcpyHostToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 68, cudaMemcpyHostToDevice), cudaErrorInvalidValue);  // past
  EXPECT_EQ(cudaMemcpyAsync(h.data(), d + 1, 64, cudaMemcpyDeviceToHost, 0),
            cudaErrorInvalidValue);
  CHECK_CUDA(cudaMemcpy(h.data(), d, 64, cudaMemcpyDefault));  // inferred: device to host
  EXPECT_EQ(h, std::vector<float>(16, 1.0f));
  EXPECT_EQ(cudaMemset(h.data(), 0, 64), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(h.data()), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(d + 1), cudaErrorInvalidValue);
  cudaPointerAttributes attributes;
  CHECK_CUDA(cudaPointerGetAttributes(&attributes, d));
  EXPECT_EQ(attributes.type, cudaMemoryTypeDevice);
  CHECK_CUDA(cudaPointerGetAttributes(&attributes, h.data()));
  EXPECT_EQ(attributes.type, cudaMemoryTypeUnregistered);
  CHECK_CUDA(cudaFree(d));
  EXPECT_EQ(cudaFree(d), cudaErrorInvalidValue);  // twice
  cudaGetLastError();
}

// ---- Asynchrony: nothing runs at the enqueue.

TEST(EmulatedDevice, AsyncDeviceToHostDestinationIsPoisonUntilTheStreamIsSynchronised) {
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  float* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, 4 * sizeof(float)));
  CHECK_CUDA(cudaMemsetAsync(d, 0, 16, stream));
  std::vector<float> h(4, 7.0f);
  CHECK_CUDA(cudaMemcpyAsync(h.data(), d, 16, cudaMemcpyDeviceToHost, stream));
  for (float x : h) EXPECT_TRUE(is_poison(x));
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  EXPECT_EQ(cudaStreamQuery(stream), cudaSuccess);
  EXPECT_EQ(h, std::vector<float>(4, 0.0f));
  CHECK_CUDA(cudaFree(d));
  CHECK_CUDA(cudaStreamDestroy(stream));
}

void set_flag(void* flag) {
  *static_cast<bool*>(flag) = true;
}

TEST(EmulatedDevice, HostFunctionsRunInStreamOrderWhenDrained) {
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  bool ran = false;
  CHECK_CUDA(cudaLaunchHostFunc(stream, set_flag, &ran));
  EXPECT_FALSE(ran);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  EXPECT_TRUE(ran);
  CHECK_CUDA(cudaStreamDestroy(stream));
}

__global__ void fill_kernel(float* p, int n, float value) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) p[i] = value;
}

// Stream b copies what stream a writes: without an event the copy may run first.
std::vector<float> copy_across_streams(bool with_event) {
  cudaStream_t a, b;
  cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
  cudaEvent_t written;
  cudaEventCreateWithFlags(&written, cudaEventDisableTiming);
  float *x = nullptr, *y = nullptr;
  cudaMalloc(&x, 8 * sizeof(float));
  cudaMalloc(&y, 8 * sizeof(float));
  cudaMemsetAsync(y, 0, 32, b);
  fill_kernel<<<1, 8, 0, a>>>(x, 8, 3.0f);
  if (with_event) {
    cudaEventRecord(written, a);
    cudaStreamWaitEvent(b, written, 0);
  }
  cudaMemcpyAsync(y, x, 32, cudaMemcpyDeviceToDevice, b);
  std::vector<float> h(8);
  cudaMemcpyAsync(h.data(), y, 32, cudaMemcpyDeviceToHost, b);
  cudaStreamSynchronize(b);  // drains b (and what it waits for), not a
  cudaDeviceSynchronize();
  cudaFree(x);
  cudaFree(y);
  cudaEventDestroy(written);
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
  return h;
}

TEST(EmulatedDevice, TwoStreamsWithoutAnEventRunInTheWrongOrder) {
  const std::vector<float> h = copy_across_streams(false);
  for (float x : h) EXPECT_TRUE(is_poison(x));  // x before the kernel wrote it
}

TEST(EmulatedDevice, TwoStreamsWithAnEventRunInOrder) {
  EXPECT_EQ(copy_across_streams(true), std::vector<float>(8, 3.0f));
}

void sleep_20ms(void*) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

TEST(EmulatedDevice, EventsTimeTheWorkBetweenThem) {
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  cudaEvent_t start, stop, untimed;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  CHECK_CUDA(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
  CHECK_CUDA(cudaEventRecord(start, stream));
  CHECK_CUDA(cudaLaunchHostFunc(stream, sleep_20ms, nullptr));
  CHECK_CUDA(cudaEventRecord(stop, stream));
  CHECK_CUDA(cudaEventRecord(untimed, stream));
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, stop), cudaErrorNotReady);  // nothing ran yet
  CHECK_CUDA(cudaEventSynchronize(stop));
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  EXPECT_GE(ms, 20.0f);
  EXPECT_LT(ms, 5000.0f);
  EXPECT_EQ(cudaEventQuery(untimed), cudaErrorNotReady);  // not ready once; then it has run
  EXPECT_EQ(cudaEventQuery(untimed), cudaSuccess);
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, untimed), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaEventDestroy(untimed);
  CHECK_CUDA(cudaStreamDestroy(stream));
}

// ---- Warp shuffles and the device's description.

__global__ void shuffle_kernel(float* out) {
  float value = static_cast<float>(threadIdx.x);
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffffu, value, offset);
  const float everywhere = __shfl_sync(0xffffffffu, value, 0);
  const float neighbour = __shfl_xor_sync(0xffffffffu, static_cast<float>(threadIdx.x), 1);
  out[threadIdx.x] = everywhere;
  out[32 + threadIdx.x] = neighbour;
}

TEST(EmulatedDevice, ShufflesExchangeTheLanesValues) {
  const auto [forward, reverse] =
      in_two_orders(64, [](float* out) { shuffle_kernel<<<1, 32>>>(out); });
  for (int l = 0; l < 32; ++l) {
    EXPECT_EQ(forward[l], 496.0f);
    EXPECT_EQ(forward[32 + l], static_cast<float>(l ^ 1));
  }
  EXPECT_EQ(reverse, forward);
}

// ---- The words of a class argument that the launch record reads as pointers.

struct PaddedArgument {  // a pointer, then a bool and seven bytes of padding
  float* data;
  bool flag;
};

// The padding of a class argument keeps what the caller's stack held; once a device address sat
// there, the launch record named an allocation the kernel never touches, in one thread order and
// not the other (cuda_emulator_orders_identical failed on an rmsnorm functor that way).
TEST(EmulatedDevice, PaddingOfAClassArgumentIsNotReadAsAPointer) {
  float* device = nullptr;
  CHECK_CUDA(cudaMalloc(&device, 64 * sizeof(float)));
  PaddedArgument argument;
  std::memset(&argument, 0, sizeof argument);
  argument.data = nullptr;
  float* stale = device + 8;
  std::memcpy(reinterpret_cast<char*>(&argument) + offsetof(PaddedArgument, flag), &stale,
              sizeof stale);  // the flag's word holds a device address
  argument.flag = true;       // and the flag overwrites its lowest byte only

  std::vector<const void*> words;
  cuda_emulator::add_pointers(argument, words);
  ASSERT_EQ(words.size(), 2u);
  EXPECT_NE(words[1], reinterpret_cast<const void*>(std::uintptr_t{1}));  // what it would read

  PaddedArgument copied = argument;
  cuda_emulator::clear_padding(copied);
  EXPECT_TRUE(copied.flag);
  words.clear();
  cuda_emulator::add_pointers(copied, words);
  ASSERT_EQ(words.size(), 2u);
  EXPECT_EQ(words[0], nullptr);
  EXPECT_EQ(words[1], reinterpret_cast<const void*>(std::uintptr_t{1}));
  cudaFree(device);
}

TEST(EmulatedDevice, DescribesAnEmulatedSm90Device) {
  int count = 0;
  CHECK_CUDA(cudaGetDeviceCount(&count));
  EXPECT_EQ(count, 1);
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  EXPECT_STREQ(prop.name, "boostlm emulated CUDA device (sm_90)");
  EXPECT_EQ(prop.major, 9);
  EXPECT_EQ(prop.sharedMemPerBlockOptin, 232448u);
  int optin = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  EXPECT_EQ(optin, 232448);
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument");
  cudaGetLastError();
}

}  // namespace

// ---- The counters (cuda_emulator/counters.h): what launchers declare, what copies move, and
// count-only mode.

__global__ void write_ones_kernel(float* out, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = 1.0f;
}

namespace {

const cuda_emulator::KernelCounters* find_row(const std::vector<cuda_emulator::KernelCounters>& rows,
                                              const std::string& kernel) {
  for (const auto& r : rows)
    if (r.kernel == kernel) return &r;
  return nullptr;
}

TEST(EmulatedDevice, CountersHoldDeclaredBytesAndTheCopiesBytes) {
  float* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, 64 * sizeof(float)));
  cuda_emulator::reset_kernel_counters();
  cuda_emulator::declare_next_launch({.bytes_written = 256, .file = __FILE__});
  write_ones_kernel<<<1, 32>>>(p, 64);
  write_ones_kernel<<<1, 32>>>(p, 64);  // undeclared
  std::vector<float> host(64);
  CHECK_CUDA(cudaMemcpy(host.data(), p, 256, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemset(p, 0, 128));
  const auto rows = cuda_emulator::kernel_counters();
  const auto* kernel = find_row(rows, "write_ones_kernel");
  ASSERT_NE(kernel, nullptr);
  EXPECT_EQ(kernel->launches, 2u);
  EXPECT_EQ(kernel->undeclared, 1u);
  EXPECT_EQ(kernel->bytes_written, 256u);
  EXPECT_EQ(kernel->tensor_flops, 0u);
  const auto* copy = find_row(rows, "cudaMemcpy device to host");
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->bytes_read, 256u);
  EXPECT_EQ(copy->bytes_written, 0u);
  const auto* set = find_row(rows, "cudaMemset");
  ASSERT_NE(set, nullptr);
  EXPECT_EQ(set->bytes_written, 128u);
  for (float x : host) EXPECT_EQ(x, 1.0f);
  CHECK_CUDA(cudaFree(p));
}

TEST(EmulatedDevice, CountOnlyModeCountsWithoutExecutingAndHandsOutZeroedMemory) {
  cuda_emulator::set_count_only(true);
  float* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, 64 * sizeof(float)));
  cuda_emulator::reset_kernel_counters();
  cuda_emulator::declare_next_launch({.tensor_flops = 4096, .bytes_written = 256, .file = __FILE__});
  write_ones_kernel<<<1, 32>>>(p, 64);
  std::vector<float> host(64, -1.0f);
  CHECK_CUDA(cudaMemcpy(host.data(), p, 256, cudaMemcpyDeviceToHost));
  for (float x : host) EXPECT_EQ(x, -1.0f);  // the copy is counted, not run
  const auto rows = cuda_emulator::kernel_counters();
  cuda_emulator::set_count_only(false);
  CHECK_CUDA(cudaMemcpy(host.data(), p, 256, cudaMemcpyDeviceToHost));
  for (float x : host) EXPECT_EQ(x, 0.0f);  // the kernel did not run; fresh memory is zero
  const auto* kernel = find_row(rows, "write_ones_kernel");
  ASSERT_NE(kernel, nullptr);
  EXPECT_EQ(kernel->launches, 1u);
  EXPECT_EQ(kernel->tensor_flops, 4096u);  // as declared: nothing ran to count
  const auto* copy = find_row(rows, "cudaMemcpy device to host");
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->bytes_read, 256u);
  CHECK_CUDA(cudaFree(p));
}

TEST_F(EmulatedDeviceDeathTest, TensorFlopsOtherThanDeclaredAreAFault) {
  EXPECT_DEATH(
      {
        float* out = nullptr;
        cudaMalloc(&out, 64 * sizeof(float));
        cuda_emulator::declare_next_launch({.tensor_flops = 4096, .file = __FILE__});
        write_ones_kernel<<<1, 32>>>(out, 64);
        cudaDeviceSynchronize();
      },
      "kernel write_ones_kernel .*executed 0 tensor-core FLOPs; its launcher declared 4096");
}

TEST_F(EmulatedDeviceDeathTest, ADeclarationTakenByALaunchElsewhereIsAFault) {
  EXPECT_DEATH(
      {
        float* out = nullptr;
        cudaMalloc(&out, 64 * sizeof(float));
        cuda_emulator::declare_next_launch({.bytes_written = 4, .file = "some_launcher.cu"});
        write_ones_kernel<<<1, 32>>>(out, 64);
        cudaDeviceSynchronize();
      },
      "declared in some_launcher.cu was taken by kernel write_ones_kernel");
}

}  // namespace
