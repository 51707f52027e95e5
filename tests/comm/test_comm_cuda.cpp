// Device collectives on a GPU (CTest label cuda): NCCL on one rank, the watchdog aborting a hung
// NCCL collective, and under mpirun every collective through the staged path (ranks sharing one
// GPU) and through NCCL (one GPU per rank) against the host path: the same values and exactly the
// same counts. Where no GPU is visible every test skips with the reason. Values are small integers
// or quarters, so every sum is exact in any order and results compare with EXPECT_EQ.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/cuda_transport.h"
#include "comm/mpi_runtime.h"
#include "comm/watchdog.h"
#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/device.h"
#ifdef BOOSTLM_HAVE_NCCL
#include "comm/nccl_transport.h"
#endif

namespace boostlm {
namespace {

using cuda::testing::DeviceArray;

// Skips where no GPU is visible (the same answer on every rank of a machine, so no rank is left
// waiting in a collective); otherwise selects this rank's GPU and makes a stream on it.
class CommCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (cuda::cuda_visible_devices(&why) == 0) GTEST_SKIP() << "no GPU: " << why;
    use_device_of_local_rank();
    BOOSTLM_CHECK_CUDA(cudaStreamCreate(&stream));
  }
  void TearDown() override {
    if (stream) cudaStreamDestroy(stream);
  }
  cudaStream_t stream = nullptr;
};

// Runs `operation` on a device copy of `host` and returns the device's result.
std::vector<float> on_device(const std::vector<float>& host,
                             const std::function<void(float*)>& operation) {
  DeviceArray<float> device(host);
  operation(device.get());
  BOOSTLM_CHECK_CUDA(cudaDeviceSynchronize());
  return device.download();
}

// The same calls on `host` (host memory) and `device` (device memory, its transport set): the
// values must be equal, and so must the counts.
void expect_device_matches_host(Communicator& host, Communicator& device) {
  const int n = host.size(), r = host.rank();
  ASSERT_EQ(device.size(), n);
  auto both = [&](std::vector<float> values, const std::function<void(Communicator&, float*)>& op) {
    const std::vector<float> from_device = on_device(values, [&](float* d) { op(device, d); });
    op(host, values.data());
    EXPECT_EQ(from_device, values);
  };
  std::vector<float> ranked(5);
  for (int i = 0; i < 5; ++i) ranked[i] = 10.0f * r + i - 0.25f * (i % 2 ? r : -r);
  both(ranked, [](Communicator& c, float* d) { c.all_reduce(d, 5); });
  both(ranked, [](Communicator& c, float* d) { c.all_reduce_max(d, 5); });
  both(ranked, [](Communicator& c, float* d) { c.broadcast(d, 5, c.size() - 1); });
  // all_gather in place: this rank's slot is the input.
  std::vector<float> slots(3 * n, -1);
  for (int k = 0; k < 3; ++k) slots[3 * r + k] = 7.0f * r + k;
  both(slots, [r](Communicator& c, float* d) { c.all_gather(d + 3 * r, 3, d); });
  // reduce_scatter, uneven (one NCCL Reduce per rank) and even (one ReduceScatter); the output
  // follows the input in one buffer, with a guard element after it.
  const std::vector<int64_t> table = {3, 1, 0, 2, 4, 1, 1, 2};
  for (const auto& counts :
       {std::vector<int64_t>(table.begin(), table.begin() + n), std::vector<int64_t>(n, 2)}) {
    int64_t total = 0;
    for (int64_t k : counts) total += k;
    std::vector<float> buffer(total + counts[r] + 1, -5);
    for (int64_t i = 0; i < total; ++i) buffer[i] = 1.0f * (r + 1) * (i + 1);
    both(buffer, [&](Communicator& c, float* d) { c.reduce_scatter(d, d + total, counts); });
  }
  if (n > 1) {  // a ring, non-blocking: from the left, to the right
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    std::vector<float> ring(8, -1);
    for (int i = 0; i < 4; ++i) ring[i] = 100.0f * r + i;
    both(ring, [&](Communicator& c, float* d) {
      CommRequest got = c.irecv(d + 4, 4, left, 3);
      CommRequest sent = c.isend(d, 4, right, 3);
      sent.wait();
      got.wait();
    });
  }
  both(ranked, [](Communicator& c, float* d) {
    CommRequest request = c.iall_reduce(d, 5);
    while (!request.test()) std::this_thread::yield();
  });
  for (int k = 0; k < kCollectiveKinds; ++k) {
    const auto kind = static_cast<Collective>(k);
    EXPECT_EQ(device.counts()[kind].calls, host.counts()[kind].calls) << to_string(kind);
    EXPECT_EQ(device.counts()[kind].bytes, host.counts()[kind].bytes) << to_string(kind);
  }
  if (n > 1) {
    EXPECT_GE(host.counts().total_calls(), 9);
  }
}

Communicator world() {
  return mpi_active() ? Communicator(static_cast<void*>(MPI_COMM_WORLD), "world") : Communicator();
}

// Several ranks on one GPU, as the layout tests run on a single-GPU machine.
TEST_F(CommCuda, StagedMatchesTheHostPath) {
  Communicator host = world();
  Communicator device = world();
  device.set_device_transport(make_staged_transport(device, stream));
  ASSERT_STREQ(device.device_transport()->kind(), "staged");
  expect_device_matches_host(host, device);
}

// One GPU per rank: NCCL refuses two ranks on one device.
TEST_F(CommCuda, NcclMatchesTheHostPath) {
  if (!nccl_built()) GTEST_SKIP() << "built without NCCL";
  Communicator host = world();
  if (cuda::cuda_visible_devices() < host.size())
    GTEST_SKIP() << host.size() << " ranks need " << host.size()
                 << " GPUs for NCCL (it refuses two ranks on one); the staged test covers them";
  Communicator device = world();
  device.set_device_transport(make_device_transport(device, stream));
  ASSERT_STREQ(device.device_transport()->kind(), "nccl");
  expect_device_matches_host(host, device);
}

#ifdef BOOSTLM_HAVE_NCCL
// The NCCL calls themselves on one rank (a Communicator of one never reaches its transport).
TEST_F(CommCuda, NcclOnOneRank) {
  Communicator self;
  NcclTransport nccl(self, stream);
  const std::vector<float> values = {1, -2, 3.5f, 4, 0.25f, 6};
  auto run = [](DeviceTransport::Started started) {
    if (started) started->wait();
  };
  EXPECT_EQ(
      on_device(values,
                [&](float* d) { run(nccl.all_reduce(d, 6, ElementType::f32, ReduceOp::sum)); }),
      values);
  EXPECT_EQ(
      on_device(values,
                [&](float* d) { run(nccl.all_reduce(d, 6, ElementType::f32, ReduceOp::max)); }),
      values);
  // all_gather and an equal reduce_scatter of one rank copy the first half to the second.
  const std::vector<float> copied = {1, -2, 3.5f, 1, -2, 3.5f};
  EXPECT_EQ(on_device(values, [&](float* d) { run(nccl.all_gather(d, 3, d + 3)); }), copied);
  EXPECT_EQ(on_device(values, [&](float* d) { run(nccl.reduce_scatter(d, d + 3, {3})); }), copied);
  // The grouped Reduce of the uneven path: one piece, elements 1..2 into the last two.
  const std::vector<float> piece = {1, -2, 3.5f, 4, -2, 3.5f};
  EXPECT_EQ(on_device(values,
                      [&](float* d) {
                        run(nccl.reduce_pieces(d, d + 4, {{0, 1, 2}}));
                      }),
            piece);
  EXPECT_EQ(on_device(values, [&](float* d) { run(nccl.broadcast(d, 6, 0)); }), values);
  // Send and recv to itself: held back, then queued as one group when the first is waited for
  // (queued one by one, the recv would wait forever for the send behind it).
  EXPECT_EQ(on_device(values,
                      [&](float* d) {
                        DeviceTransport::Started got =
                            nccl.recv(d + 3, 3, ElementType::f32, 0, 1);
                        DeviceTransport::Started sent = nccl.send(d, 3, ElementType::f32, 0, 1);
                        got->wait();
                        sent->wait();
                      }),
            copied);
  // Non-blocking: the completion reports ready once the stream has passed it.
  DeviceArray<float> data(values);
  DeviceTransport::Started started =
      nccl.all_reduce(data.get(), 6, ElementType::f32, ReduceOp::sum);
  ASSERT_NE(started, nullptr);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!started->ready()) ASSERT_LT(std::chrono::steady_clock::now(), give_up);
  EXPECT_EQ(data.download(), values);
}

void sleep_on_stream(void* seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(*static_cast<double*>(seconds)));
}

// A collective that does not complete: the stream is held by a host function far past the
// timeout. The wait aborts the NCCL communicator and ends the process as the MPI watchdog does.
TEST_F(CommCuda, NcclWatchdogAbortsAHungCollective) {
  if (mpi_active()) GTEST_SKIP() << "death tests fork, which MPI does not allow";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Communicator self;
        NcclTransport nccl(self, stream);
        DeviceArray<float> data(std::vector<float>(4, 1));
        // After NCCL's set-up, which on a GPU's first use took longer than the timeout (H200,
        // 2026-12-04: the watchdog fired in ncclCommInitRank instead of the collective).
        configure_watchdog(0.3);
        static double hold_s = 5;
        BOOSTLM_CHECK_CUDA(cudaLaunchHostFunc(stream, sleep_on_stream, &hold_s));
        nccl.all_reduce(data.get(), 4, ElementType::f32, ReduceOp::sum)->wait();
        std::exit(0);
      },
      testing::ExitedWithCode(kWatchdogExitCode),
      "communication watchdog: all_reduce of 16 bytes on group self has not completed within "
      "0.3 s");
}
#endif

// Which transport make_device_transport picks, without a GPU (nothing touches CUDA until data
// moves): BOOSTLM_NCCL=0 the staged path, a malformed value an error naming the variable.
TEST(CommCudaHost, TransportChoiceFollowsBoostlmNccl) {
  const char* saved = std::getenv("BOOSTLM_NCCL");
  const std::string kept = saved ? saved : "";
  Communicator self;
  setenv("BOOSTLM_NCCL", "0", 1);
  EXPECT_STREQ(make_device_transport(self, nullptr)->kind(), "staged");
  setenv("BOOSTLM_NCCL", "on", 1);
  try {
    make_device_transport(self, nullptr);
    FAIL() << "BOOSTLM_NCCL=on must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("BOOSTLM_NCCL=on"), std::string::npos) << e.what();
  }
  if (saved)
    setenv("BOOSTLM_NCCL", kept.c_str(), 1);
  else
    unsetenv("BOOSTLM_NCCL");
}

// The staged path's CUDA copies on one rank (host memory pinned, copies on the stream).
TEST_F(CommCuda, StagedCopiesOnOneRank) {
  Communicator self;
  auto staged = make_staged_transport(self, stream);
  const std::vector<float> values = {1, -2, 3.5f, 4, 0.25f, 6};
  const std::vector<float> copied = {1, -2, 3.5f, 1, -2, 3.5f};
  auto run = [](DeviceTransport::Started started) {
    if (started) started->wait();
  };
  EXPECT_EQ(on_device(values, [&](float* d) { run(staged->all_gather(d, 3, d + 3)); }), copied);
  EXPECT_EQ(on_device(values, [&](float* d) { run(staged->reduce_scatter(d, d + 3, {3})); }),
            copied);
  EXPECT_EQ(
      on_device(values,
                [&](float* d) { run(staged->all_reduce(d, 6, ElementType::f32, ReduceOp::sum)); }),
      values);
}

}  // namespace
}  // namespace boostlm
