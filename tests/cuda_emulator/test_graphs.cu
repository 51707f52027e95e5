// Stream capture and graphs on the emulated device (cuda_emulator/streams.h): a capture records
// and does not run; a graph replays its nodes with the arguments they were captured with; what a
// GPU refuses while capturing is refused with its error and invalidates the capture where a GPU
// does; the counters tell a graph's launches from the host's.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda_emulator/counters.h"
#include "cuda_emulator/emulator.h"

namespace {

#define CHECK_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

__global__ void add_kernel(float* p, int n, const float* amount) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) p[i] += *amount;
}

__global__ void scale_kernel(float* p, int n, float by) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) p[i] *= by;
}

class Graphs : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&x, kN * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&amount, sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&host), kN * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMemset(x, 0, kN * sizeof(float)), cudaSuccess);
  }
  void TearDown() override {
    cudaGetLastError();
    cudaFree(x);
    cudaFree(amount);
    cudaFreeHost(host);
    cudaStreamDestroy(stream);
  }
  std::vector<float> read() {
    std::vector<float> h(kN);
    EXPECT_EQ(cudaMemcpy(h.data(), x, kN * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  // Captures: host[0] -> amount (pinned copy), x += amount, x *= 2, x -> host (pinned copy).
  cudaGraph_t capture_step() {
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    EXPECT_EQ(cudaMemcpyAsync(amount, host, sizeof(float), cudaMemcpyHostToDevice, stream),
              cudaSuccess);
    add_kernel<<<1, 32, 0, stream>>>(x, kN, amount);
    scale_kernel<<<1, 32, 0, stream>>>(x, kN, 2.0f);
    EXPECT_EQ(cudaMemcpyAsync(host, x, kN * sizeof(float), cudaMemcpyDeviceToHost, stream),
              cudaSuccess);
    EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    return graph;
  }

  static constexpr int kN = 64;
  cudaStream_t stream = nullptr;
  float* x = nullptr;
  float* amount = nullptr;
  float* host = nullptr;  // pinned
};

TEST_F(Graphs, ACaptureRecordsWithoutRunningAndReplaysWithWhatTheHostWritesBeforeEachLaunch) {
  host[0] = 1.0f;
  cudaGraph_t graph = capture_step();
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(read(), std::vector<float>(kN, 0.0f));  // nothing ran
  std::size_t nodes = 0;
  CHECK_CUDA(cudaGraphGetNodes(graph, nullptr, &nodes));
  EXPECT_EQ(nodes, 4u);
  cudaGraphExec_t exec = nullptr;
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  CHECK_CUDA(cudaGraphDestroy(graph));  // the executable graph does not need it
  // Step 1 with amount 1: (0 + 1) * 2 = 2; step 2 with amount 3: (2 + 3) * 2 = 10. The value the
  // host writes into pinned memory before a launch is what that launch reads.
  CHECK_CUDA(cudaGraphLaunch(exec, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  EXPECT_EQ(host[kN - 1], 2.0f);
  host[0] = 3.0f;
  CHECK_CUDA(cudaGraphLaunch(exec, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  EXPECT_EQ(host[5], 10.0f);
  EXPECT_EQ(read(), std::vector<float>(kN, 10.0f));
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaErrorInvalidValue);
  cudaGetLastError();
}

TEST_F(Graphs, CountersTellTheGraphsLaunchesFromTheHosts) {
  host[0] = 1.0f;
  cudaGraph_t graph = capture_step();
  cudaGraphExec_t exec = nullptr;
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  cuda_emulator::reset_kernel_counters();
  for (int i = 0; i < 3; ++i) CHECK_CUDA(cudaGraphLaunch(exec, stream));
  scale_kernel<<<1, 32, 0, stream>>>(x, kN, 1.0f);  // one from the host
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::uint64_t graph_launches = 0, host_launches = 0;
  for (const auto& row : cuda_emulator::kernel_counters()) {
    graph_launches += row.graph_launches;
    host_launches += row.launches - row.graph_launches;
    if (row.kernel == "cudaGraphLaunch") {
      EXPECT_EQ(row.launches, 3u);
    }
    if (row.kernel == "scale_kernel") {
      EXPECT_EQ(row.launches, 4u);
      EXPECT_EQ(row.graph_launches, 3u);
    }
  }
  EXPECT_EQ(graph_launches, 12u);  // 4 nodes, 3 replays
  EXPECT_EQ(host_launches, 4u);    // 3 graph launches and the kernel
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(graph));
}

TEST_F(Graphs, SynchronisingTheCapturingStreamInvalidatesTheCapture) {
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  scale_kernel<<<1, 32, 0, stream>>>(x, kN, 2.0f);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaErrorStreamCaptureUnsupported);
  cudaStreamCaptureStatus status;
  CHECK_CUDA(cudaStreamIsCapturing(stream, &status));
  EXPECT_EQ(status, cudaStreamCaptureStatusInvalidated);
  scale_kernel<<<1, 32, 0, stream>>>(x, kN, 2.0f);
  EXPECT_EQ(cudaGetLastError(), cudaErrorStreamCaptureInvalidated);
  cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(1);
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(graph, nullptr);
  CHECK_CUDA(cudaStreamIsCapturing(stream, &status));
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
}

TEST_F(Graphs, AHostReadWhileCapturingIsRefused) {
  // A synchronous copy to the host (and a query or a device synchronisation) is a read the capture
  // cannot hold: refused, and the capture with it.
  for (int which = 0; which < 3; ++which) {
    CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    scale_kernel<<<1, 32, 0, stream>>>(x, kN, 2.0f);
    float value = 0;
    cudaError_t refused = cudaSuccess;
    if (which == 0) refused = cudaMemcpy(&value, x, sizeof value, cudaMemcpyDeviceToHost);
    if (which == 1) refused = cudaStreamQuery(stream);
    if (which == 2) refused = cudaDeviceSynchronize();
    EXPECT_EQ(refused, cudaErrorStreamCaptureUnsupported) << which;
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureInvalidated) << which;
    cudaGetLastError();
  }
  EXPECT_EQ(read(), std::vector<float>(kN, 0.0f));  // nothing captured ever ran
}

TEST_F(Graphs, AllocationWhileCapturingIsRefusedUnlessTheThreadIsRelaxed) {
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
  EXPECT_EQ(mode, cudaStreamCaptureModeGlobal);
  float* scratch = nullptr;
  CHECK_CUDA(cudaMalloc(&scratch, 256));  // relaxed: allowed, and not part of the graph
  CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));  // back to global
  scale_kernel<<<1, 32, 0, stream>>>(scratch, 8, 2.0f);
  cudaGraph_t graph = nullptr;
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  CHECK_CUDA(cudaGraphDestroy(graph));
  CHECK_CUDA(cudaFree(scratch));

  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  EXPECT_EQ(cudaMalloc(&scratch, 256), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();
}

TEST_F(Graphs, PageableHostMemoryInACapturedCopyIsRefused) {
  std::vector<float> pageable(kN);
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  EXPECT_EQ(cudaMemcpyAsync(x, pageable.data(), 4, cudaMemcpyHostToDevice, stream),
            cudaErrorStreamCaptureUnsupported);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();
}

TEST_F(Graphs, AForkedStreamMustBeJoinedBack) {
  cudaStream_t side;
  CHECK_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  CHECK_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CHECK_CUDA(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  for (const bool joined : {true, false}) {
    CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    scale_kernel<<<1, 32, 0, stream>>>(x, kN, 2.0f);
    CHECK_CUDA(cudaEventRecord(fork, stream));
    EXPECT_EQ(cudaEventQuery(fork), cudaErrorCapturedEvent);
    CHECK_CUDA(cudaStreamWaitEvent(side, fork, 0));  // side joins the capture
    cudaStreamCaptureStatus status;
    CHECK_CUDA(cudaStreamIsCapturing(side, &status));
    EXPECT_EQ(status, cudaStreamCaptureStatusActive);
    scale_kernel<<<1, 32, 0, side>>>(x, kN, 3.0f);
    if (joined) {
      CHECK_CUDA(cudaEventRecord(join, side));
      CHECK_CUDA(cudaStreamWaitEvent(stream, join, 0));
    }
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(stream, &graph),
              joined ? cudaSuccess : cudaErrorStreamCaptureUnjoined);
    CHECK_CUDA(cudaStreamIsCapturing(side, &status));
    EXPECT_EQ(status, cudaStreamCaptureStatusNone);  // left the capture either way
    if (graph) {
      CHECK_CUDA(cudaGraphDestroy(graph));
    }
    cudaGetLastError();
  }
  cudaEventDestroy(fork);
  cudaEventDestroy(join);
  cudaStreamDestroy(side);
}

TEST_F(Graphs, WaitingOnWorkOutsideTheCaptureIsRefused) {
  cudaEvent_t before;
  CHECK_CUDA(cudaEventCreateWithFlags(&before, cudaEventDisableTiming));
  CHECK_CUDA(cudaEventRecord(before, stream));
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  EXPECT_EQ(cudaStreamWaitEvent(stream, before, 0), cudaErrorStreamCaptureIsolation);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureInvalidated);
  cudaEventDestroy(before);
  cudaGetLastError();
}

TEST_F(Graphs, TheLegacyStreamCannotCaptureNorRunBesideABlockingCapture) {
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal),
            cudaErrorStreamCaptureUnsupported);
  cudaStream_t blocking;
  CHECK_CUDA(cudaStreamCreate(&blocking));
  CHECK_CUDA(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeRelaxed));
  scale_kernel<<<1, 32>>>(x, kN, 2.0f);  // legacy: would wait for the capturing stream
  EXPECT_EQ(cudaGetLastError(), cudaErrorStreamCaptureImplicit);
  EXPECT_EQ(cudaStreamEndCapture(blocking, &graph), cudaErrorStreamCaptureInvalidated);
  cudaStreamDestroy(blocking);
  cudaGetLastError();
}

}  // namespace
