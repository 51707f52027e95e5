// The backend's NCCL transport (comm/nccl_transport.cpp) executed on the emulated NCCL and device:
// its bootstrap, every operation it offers against the host path's values on the same group
// (world under mpirun, this process alone without it), the held send/recv flushed as one group, a
// non-blocking completion polled until ready, and a host pointer refused with the call's name.
// Values are small integers or quarters: every sum is exact in any order (EXPECT_EQ).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cuda_runtime_api.h>

#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_runtime.h"
#include "comm/nccl_transport.h"
#include "core/error.h"
#include "core/graph_capture.h"

namespace boostlm {
namespace {

Communicator world() {
  return mpi_active() ? Communicator(static_cast<void*>(MPI_COMM_WORLD), "world") : Communicator();
}

class NcclTransportOnEmulator : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess); }
  void TearDown() override { cudaStreamDestroy(stream); }
  cudaStream_t stream = nullptr;
};

// Runs `operation` on a device copy of `host` and returns the device's values afterwards.
template <typename T>
std::vector<T> on_device(const std::vector<T>& host, const std::function<void(T*)>& operation) {
  T* device = nullptr;
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  operation(device);
  std::vector<T> result(host.size());
  EXPECT_EQ(cudaMemcpy(result.data(), device, host.size() * sizeof(T), cudaMemcpyDeviceToHost),
            cudaSuccess);
  cudaFree(device);
  return result;
}

void finish(DeviceTransport::Started started) {
  if (started) started->wait();
}

TEST_F(NcclTransportOnEmulator, EveryOperationMatchesTheHostPath) {
  Communicator host = world();
  NcclTransport nccl(host, stream);
  EXPECT_STREQ(nccl.kind(), "nccl");
  const int n = host.size(), r = host.rank();
  std::vector<float> ranked(5);
  for (int i = 0; i < 5; ++i) ranked[i] = 10.0f * r + i - 0.25f * (i % 2 ? r : -r);

  std::vector<float> want = ranked;
  host.all_reduce(want.data(), 5);
  EXPECT_EQ(on_device<float>(
                ranked,
                [&](float* d) { finish(nccl.all_reduce(d, 5, ElementType::f32, ReduceOp::sum)); }),
            want);
  want = ranked;
  host.all_reduce_max(want.data(), 5);
  EXPECT_EQ(on_device<float>(
                ranked,
                [&](float* d) { finish(nccl.all_reduce(d, 5, ElementType::f32, ReduceOp::max)); }),
            want);
  std::vector<double> doubles = {0.5 * r, -1.0, 3.0 * r};
  std::vector<double> want_doubles = doubles;
  host.all_reduce(want_doubles.data(), 3);
  EXPECT_EQ(on_device<double>(
                doubles,
                [&](double* d) { finish(nccl.all_reduce(d, 3, ElementType::f64, ReduceOp::sum)); }),
            want_doubles);

  // all_gather in place: this rank's slot of the output is the input.
  std::vector<float> slots(3 * n, -1);
  for (int k = 0; k < 3; ++k) slots[3 * r + k] = 7.0f * r + k;
  want = slots;
  host.all_gather(want.data() + 3 * r, 3, want.data());
  EXPECT_EQ(on_device<float>(slots, [&](float* d) { finish(nccl.all_gather(d + 3 * r, 3, d)); }),
            want);

  // reduce_scatter: uneven (one grouped ncclReduce per rank) and even (one ncclReduceScatter);
  // the output follows the input in one buffer, with a guard element after it.
  const std::vector<int64_t> table = {3, 1, 0, 2, 4, 1, 1, 2};
  for (const auto& counts :
       {std::vector<int64_t>(table.begin(), table.begin() + n), std::vector<int64_t>(n, 2)}) {
    int64_t total = 0;
    for (int64_t k : counts) total += k;
    std::vector<float> buffer(total + counts[r] + 1, -5);
    for (int64_t i = 0; i < total; ++i) buffer[i] = 1.0f * (r + 1) * (i + 1);
    want = buffer;
    host.reduce_scatter(want.data(), want.data() + total, counts);
    EXPECT_EQ(on_device<float>(
                  buffer, [&](float* d) { finish(nccl.reduce_scatter(d, d + total, counts)); }),
              want)
        << "counts[0]=" << counts[0];
  }

  want = ranked;
  host.broadcast(want.data(), 5, n - 1);
  EXPECT_EQ(on_device<float>(ranked, [&](float* d) { finish(nccl.broadcast(d, 5, n - 1)); }), want);

  // A ring, posted as the pipeline posts it (recv, then send) and held until the first wait.
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  std::vector<float> ring(8, -1);
  for (int i = 0; i < 4; ++i) ring[i] = 100.0f * r + i;
  std::vector<float> want_ring = ring;
  for (int i = 0; i < 4; ++i) want_ring[4 + i] = 100.0f * left + i;
  EXPECT_EQ(on_device<float>(ring,
                             [&](float* d) {
                               DeviceTransport::Started got =
                                   nccl.recv(d + 4, 4, ElementType::f32, left, 3);
                               DeviceTransport::Started sent =
                                   nccl.send(d, 4, ElementType::f32, right, 3);
                               got->wait();
                               sent->wait();
                             }),
            want_ring);

  // bf16 (issue 60): an all-reduce, a row message in the device's split format (the values as
  // ncclBfloat16 and the statistics as ncclFloat in one group) and a bf16 ring, against the host
  // path's values (quarters and small integers: exact in bf16 in any order).
  std::vector<bf16_t> halves(7);
  for (int i = 0; i < 7; ++i) halves[i] = float_to_bf16(0.25f * i - r);
  std::vector<bf16_t> want_halves = halves;
  host.all_reduce(want_halves.data(), 7);
  EXPECT_EQ(on_device<bf16_t>(halves,
                              [&](bf16_t* d) {
                                finish(nccl.all_reduce(d, 7, ElementType::bf16, ReduceOp::sum));
                              }),
            want_halves);
  const RowMessage split = split_rows(3, 5, 1), rows_host = host.row_message(3, 5, 1);
  std::vector<bf16_t> message(split.bytes / 2), message_host(rows_host.bytes / 2);
  for (int64_t row = 0; row < 3; ++row) {
    for (int64_t c = 0; c < 5; ++c) {
      split.values_in(message.data())[row * split.values_ld + c] = float_to_bf16(0.5f * c - r);
      rows_host.values_in(message_host.data())[row * rows_host.values_ld + c] =
          float_to_bf16(0.5f * c - r);
    }
    split.stats_in(message.data())[row * split.stats_ld] = 0.125f * (row + r);
    rows_host.stats_in(message_host.data())[row * rows_host.stats_ld] = 0.125f * (row + r);
  }
  host.all_reduce_rows(message_host.data(), rows_host);
  const std::vector<bf16_t> summed = on_device<bf16_t>(
      message, [&](bf16_t* d) { finish(nccl.all_reduce_rows(d, split)); });
  for (int64_t row = 0; row < 3; ++row) {
    for (int64_t c = 0; c < 5; ++c)
      EXPECT_EQ(split.values_in(const_cast<bf16_t*>(summed.data()))[row * split.values_ld + c],
                rows_host.values_in(message_host.data())[row * rows_host.values_ld + c]);
    EXPECT_EQ(split.stats_in(const_cast<bf16_t*>(summed.data()))[row * split.stats_ld],
              rows_host.stats_in(message_host.data())[row * rows_host.stats_ld]);
  }
  std::vector<bf16_t> ring16(8, 0);
  for (int i = 0; i < 4; ++i) ring16[i] = float_to_bf16(100.0f * r + i);
  std::vector<bf16_t> want_ring16 = ring16;
  for (int i = 0; i < 4; ++i) want_ring16[4 + i] = float_to_bf16(100.0f * left + i);
  EXPECT_EQ(on_device<bf16_t>(ring16,
                              [&](bf16_t* d) {
                                DeviceTransport::Started got =
                                    nccl.recv(d + 4, 4, ElementType::bf16, left, 5);
                                DeviceTransport::Started sent =
                                    nccl.send(d, 4, ElementType::bf16, right, 5);
                                got->wait();
                                sent->wait();
                              }),
            want_ring16);

  // Non-blocking: ready() drives the stream until the operation has completed.
  want = ranked;
  host.all_reduce(want.data(), 5);
  EXPECT_EQ(on_device<float>(ranked,
                             [&](float* d) {
                               DeviceTransport::Started started =
                                   nccl.all_reduce(d, 5, ElementType::f32, ReduceOp::sum);
                               ASSERT_NE(started, nullptr);
                               int polls = 0;
                               while (!started->ready()) ASSERT_LT(++polls, 1000000);
                             }),
            want);
}

// Host memory handed to the transport (the backend's bug class): refused at the call, on every
// rank alike, with NCCL's error and the emulator's message naming the call.
TEST_F(NcclTransportOnEmulator, HostMemoryIsRefused) {
  Communicator host = world();
  NcclTransport nccl(host, stream);
  float on_stack[4] = {1, 2, 3, 4};
  try {
    finish(nccl.all_reduce(on_stack, 4, ElementType::f32, ReduceOp::sum));
    FAIL() << "a host pointer was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("ncclAllReduce"), std::string::npos) << what;
    EXPECT_NE(what.find("invalid argument"), std::string::npos) << what;
    EXPECT_NE(what.find("is not device memory"), std::string::npos) << what;
  }
}

// CUDA graphs with collectives (issue 47; kernels/graph.h does this around a model's calls): a
// Communicator's device collectives captured on the transport's stream become nodes of the graph,
// rerun at each launch; the counts the capture made are added again at each replay through the
// registered host work, and after each launch the host waits on the group's fence. A host
// exchange inside the capture is refused, since the graph would not repeat it.
TEST_F(NcclTransportOnEmulator, CollectivesCapturedInAGraphReplayAndAreCountedPerLaunch) {
  Communicator group = world();
  if (group.size() == 1) GTEST_SKIP() << "a group of one communicates nothing";
  group.set_device_transport(std::make_unique<NcclTransport>(group, stream));
  ASSERT_TRUE(group.device_transport()->capturable());
  const int n = group.size();
  std::vector<float> host(6, 1.0f + group.rank());
  float* data = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&data), host.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(data, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);

  GraphHostWork work;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  set_graph_capture(&work);
  group.all_reduce(data, 6);  // queued as nodes: nothing runs, nothing to wait for
  group.all_reduce(data, 6);
  double on_host = 1;
  try {
    group.all_reduce_host(&on_host, 1);
    ADD_FAILURE() << "a host exchange was accepted inside a capture";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("inside a captured CUDA graph"), std::string::npos)
        << e.what();
  }
  set_graph_capture(nullptr);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  EXPECT_EQ(group.counts()[Collective::all_reduce].calls, 2);  // counted as they were captured
  EXPECT_EQ(work.on_replay.size(), 2u);
  ASSERT_EQ(work.after_launch.size(), 1u) << "one fence per group and graph";

  std::vector<float> values(6);
  ASSERT_EQ(cudaMemcpy(values.data(), data, 24, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(values[0], 1.0f + group.rank()) << "the capture ran a collective";
  // The capture's own launch (fenced), then two replays (fenced, counted again).
  float expected = 1.0f + group.rank(), sum_of_ranks = n * (n + 1) / 2.0f;
  for (int launch = 0; launch < 3; ++launch) {
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    if (launch > 0)
      for (const auto& action : work.on_replay) action();
    for (const auto& action : work.after_launch) action();
    // Two all-reduces of values equal on every rank but the first launch's input.
    expected = launch == 0 ? sum_of_ranks * n : expected * n * n;
    ASSERT_EQ(cudaMemcpy(values.data(), data, 24, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(values[5], expected) << "launch " << launch;
  }
  // 2 captured + 2 per replay; the refused host call counted nothing.
  EXPECT_EQ(group.counts()[Collective::all_reduce].calls, 2 + 2 * 2);
  EXPECT_EQ(group.counts()[Collective::all_reduce].bytes, 6 * 6 * 4);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(data);
}

// Data parallelism's side stream (issue 47): the operations run on a stream of the transport's
// own, after the caller's work queued so far, and join() makes the caller's stream wait for them
// (a blocking call joins by itself). Inside a capture they are a fork of the graph: the graph
// reduces at each launch once joined, and a capture ended before the join fails with unjoined
// work, as it does on a GPU.
TEST_F(NcclTransportOnEmulator, SideStreamForksFromAndJoinsTheCallersStream) {
  Communicator group = world();
  if (group.size() == 1) GTEST_SKIP() << "a group of one communicates nothing";
  group.set_device_transport(std::make_unique<NcclTransport>(group, stream, /*side_stream=*/true));
  const int n = group.size();
  const float sum_of_ranks = n * (n + 1) / 2.0f;
  const std::vector<float> host(6, 1.0f + group.rank());
  std::vector<float> values(6);
  float* data = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&data), 24), cudaSuccess);
  // Outside a capture: what the caller's stream wrote is reduced; its next copy sees the sums.
  ASSERT_EQ(cudaMemcpyAsync(data, host.data(), 24, cudaMemcpyHostToDevice, stream), cudaSuccess);
  group.all_reduce(data, 6);
  ASSERT_EQ(cudaMemcpyAsync(values.data(), data, 24, cudaMemcpyDeviceToHost, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(values[0], sum_of_ranks);

  // A capture of an iall_reduce joined before its end (GradReducer::finish's order).
  GraphHostWork work;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  set_graph_capture(&work);
  CommRequest request = group.iall_reduce(data, 6);
  request.wait();  // nothing to wait for while capturing
  group.join_device();
  set_graph_capture(nullptr);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  float expected = sum_of_ranks;
  for (int launch = 0; launch < 2; ++launch) {
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    for (const auto& action : work.after_launch) action();  // the fence, on the caller's stream
    expected *= n;
    ASSERT_EQ(cudaMemcpy(values.data(), data, 24, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(values[5], expected) << "launch " << launch;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);

  // Not joined: the capture fails.
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  GraphHostWork unjoined;
  set_graph_capture(&unjoined);
  CommRequest left = group.iall_reduce(data, 6);
  set_graph_capture(nullptr);
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureUnjoined);
  cudaGetLastError();
  cudaFree(data);
}

}  // namespace
}  // namespace boostlm
