// The emulated NCCL (src/cuda_emulator/nccl.cpp) through the real <nccl.h> API on memory from the
// emulated runtime's cudaMalloc, under mpirun (2 and 4 ranks) and as one process without MPI:
// communicators from a broadcast unique id (also of a subset of the world, made by its members
// only), every collective's values (fp32, fp64, int32, bf16; every reduction), send/recv pairs and
// a ring in one group, stream order, a host pointer refused with ncclInvalidArgument and a message,
// argument errors, and ncclCommAbort returning at once.
//
// Values are small integers or quarters, so every fp32/fp64 sum is exact in any order and results
// compare with EXPECT_EQ; the bf16 sum is checked against the exact sum rounded once to bf16.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

int g_world_rank = 0, g_world_size = 1;
bool g_mpi = false;

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& host) : n_(host.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<std::size_t>(n_, 1) * sizeof(T)),
              cudaSuccess);
    if (n_) {
      EXPECT_EQ(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return ptr_; }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  T* ptr_ = nullptr;
  std::size_t n_;
};

// A communicator over every world rank (or this process alone without MPI), and a stream.
class Nccl : public ::testing::Test {
 protected:
  void SetUp() override {
    ncclUniqueId id;
    if (g_world_rank == 0) {
      ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    }
    if (g_mpi) MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ASSERT_EQ(ncclCommInitRank(&comm, g_world_size, id, g_world_rank), ncclSuccess);
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    rank = g_world_rank;
    size = g_world_size;
  }
  void TearDown() override {
    if (stream) cudaStreamDestroy(stream);
    if (comm) ncclCommDestroy(comm);
  }
  void sync() { ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess); }
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int rank = 0, size = 1;
};

std::vector<float> ranked(int rank, int count) {
  std::vector<float> v(count);
  for (int i = 0; i < count; ++i) v[i] = 10.0f * rank + i - 0.25f * (i % 3) * rank;
  return v;
}

TEST_F(Nccl, CommunicatorKnowsItsRankAndSize) {
  int count = 0, user_rank = -1;
  ASSERT_EQ(ncclCommCount(comm, &count), ncclSuccess);
  ASSERT_EQ(ncclCommUserRank(comm, &user_rank), ncclSuccess);
  EXPECT_EQ(count, size);
  EXPECT_EQ(user_rank, rank);
  ncclResult_t async = ncclInternalError;
  ASSERT_EQ(ncclCommGetAsyncError(comm, &async), ncclSuccess);
  EXPECT_EQ(async, ncclSuccess);
}

TEST_F(Nccl, AllReduceEveryOperation) {
  const int n = 7;
  for (ncclRedOp_t op : {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg}) {
    SCOPED_TRACE(testing::Message() << "op " << op);
    std::vector<float> want(n);
    for (int i = 0; i < n; ++i) {
      double acc = op == ncclProd ? 1 : (op == ncclMax ? -1e30 : (op == ncclMin ? 1e30 : 0));
      for (int r = 0; r < size; ++r) {
        const double x = ranked(r, n)[i];
        acc = op == ncclProd  ? acc * x
              : op == ncclMax ? std::max(acc, x)
              : op == ncclMin ? std::min(acc, x)
                              : acc + x;
      }
      want[i] = static_cast<float>(op == ncclAvg ? acc / size : acc);
    }
    DeviceArray<float> send(ranked(rank, n)), recv(std::vector<float>(n, -1));
    ASSERT_EQ(ncclAllReduce(send.get(), recv.get(), n, ncclFloat, op, comm, stream), ncclSuccess);
    sync();
    EXPECT_EQ(recv.download(), want);
    EXPECT_EQ(send.download(), ranked(rank, n));  // the input is left alone
  }
}

TEST_F(Nccl, AllReduceInPlaceOfDoublesAndInts) {
  DeviceArray<double> d(std::vector<double>{1.0 * rank, 0.5, -2.0 * rank});
  ASSERT_EQ(ncclAllReduce(d.get(), d.get(), 3, ncclDouble, ncclSum, comm, stream), ncclSuccess);
  std::vector<int32_t> ints = {rank + 1, -rank, 7};
  DeviceArray<int32_t> i(ints);
  ASSERT_EQ(ncclAllReduce(i.get(), i.get(), 3, ncclInt32, ncclMax, comm, stream), ncclSuccess);
  sync();
  const double ranks_sum = size * (size - 1) / 2.0;
  EXPECT_EQ(d.download(), (std::vector<double>{ranks_sum, 0.5 * size, -2.0 * ranks_sum}));
  EXPECT_EQ(i.download(), (std::vector<int32_t>{size, 0, 7}));
}

uint16_t bf16_bits(float x) {  // x must be a bf16 value
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return static_cast<uint16_t>(bits >> 16);
}
float bf16_value(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &wide, 4);
  return x;
}

// bf16: the fp32 sum of the ranks' values, rounded once to bf16 (to nearest even). Rank r gives
// 1 + (r + 1)·2^-7; on 2 and 4 ranks the exact sum lies halfway between two bf16 neighbours (2 +
// 1.5 ulp, 4 + 2.5 ulp), so ties-to-even decides, and on 4 ranks rounding after each addition in
// rank order would give 4 + 3·2^-5 instead of 4 + 2^-4.
TEST_F(Nccl, Bf16SumsInFp32AndRoundsOnce) {
  const float mine = 1 + (rank + 1) * 0x1p-7f;
  DeviceArray<uint16_t> d(std::vector<uint16_t>{bf16_bits(mine), bf16_bits(-0.5f)});
  ASSERT_EQ(ncclAllReduce(d.get(), d.get(), 2, ncclBfloat16, ncclSum, comm, stream), ncclSuccess);
  sync();
  const std::vector<uint16_t> got = d.download();
  const double exact = size + size * (size + 1) / 2 * 0x1p-7;
  // `exact` rounded to 8 significant bits in double, ties to even (the default rounding mode).
  const double unit = std::ldexp(1.0, std::ilogb(exact) - 7);
  const double rounded = std::nearbyint(exact / unit) * unit;
  EXPECT_EQ(bf16_value(got[0]), static_cast<float>(rounded)) << "exact sum " << exact;
  EXPECT_EQ(bf16_value(got[1]), -0.5f * size);
  if (size == 2) {
    EXPECT_EQ(bf16_value(got[0]), 2 + 0x1p-5f);
  } else if (size == 4) {
    EXPECT_EQ(bf16_value(got[0]), 4 + 0x1p-4f);
  }
}

TEST_F(Nccl, AllGatherOutOfPlaceAndInPlace) {
  std::vector<float> want;
  for (int r = 0; r < size; ++r)
    for (int k = 0; k < 3; ++k) want.push_back(7.0f * r + k);
  DeviceArray<float> send(std::vector<float>{7.0f * rank, 7.0f * rank + 1, 7.0f * rank + 2});
  DeviceArray<float> recv(std::vector<float>(3 * size, -1));
  ASSERT_EQ(ncclAllGather(send.get(), recv.get(), 3, ncclFloat, comm, stream), ncclSuccess);
  std::vector<float> slots(3 * size, -1);
  for (int k = 0; k < 3; ++k) slots[3 * rank + k] = 7.0f * rank + k;
  DeviceArray<float> in_place(slots);
  ASSERT_EQ(ncclAllGather(in_place.get() + 3 * rank, in_place.get(), 3, ncclFloat, comm, stream),
            ncclSuccess);
  sync();
  EXPECT_EQ(recv.download(), want);
  EXPECT_EQ(in_place.download(), want);
}

TEST_F(Nccl, ReduceScatterSumsEachRanksBlock) {
  const int block = 2;
  std::vector<float> send(block * size);
  for (int i = 0; i < block * size; ++i) send[i] = (rank + 1.0f) * (i + 1);
  DeviceArray<float> d_send(send), d_recv(std::vector<float>(block, -1));
  ASSERT_EQ(ncclReduceScatter(d_send.get(), d_recv.get(), block, ncclFloat, ncclSum, comm, stream),
            ncclSuccess);
  sync();
  const float ranks = size * (size + 1) / 2.0f;  // Σ (r + 1)
  EXPECT_EQ(d_recv.download(),
            (std::vector<float>{ranks * (block * rank + 1), ranks * (block * rank + 2)}));
}

TEST_F(Nccl, BroadcastAndReduceFromTheLastRank) {
  const int root = size - 1;
  DeviceArray<float> data(ranked(rank, 5)), out(std::vector<float>(5, -1));
  ASSERT_EQ(ncclBroadcast(data.get(), out.get(), 5, ncclFloat, root, comm, stream), ncclSuccess);
  ASSERT_EQ(ncclBcast(data.get(), 5, ncclFloat, root, comm, stream), ncclSuccess);
  sync();
  EXPECT_EQ(out.download(), ranked(root, 5));
  EXPECT_EQ(data.download(), ranked(root, 5));

  DeviceArray<float> mine(ranked(rank, 4)), sum(std::vector<float>(4, -1));
  ASSERT_EQ(ncclReduce(mine.get(), sum.get(), 4, ncclFloat, ncclSum, root, comm, stream),
            ncclSuccess);
  sync();
  std::vector<float> want(4, 0);
  for (int r = 0; r < size; ++r)
    for (int i = 0; i < 4; ++i) want[i] += ranked(r, 4)[i];
  EXPECT_EQ(sum.download(), rank == root ? want : std::vector<float>(4, -1));
}

// Every rank receives from the left before it sends to the right, in one group: posted together,
// so no rank waits for a send queued behind its own receive. With one rank: a send to itself.
TEST_F(Nccl, SendRecvRingInOneGroup) {
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  DeviceArray<float> out(ranked(rank, 4)), in(std::vector<float>(4, -1));
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclRecv(in.get(), 4, ncclFloat, left, comm, stream), ncclSuccess);
  ASSERT_EQ(ncclSend(out.get(), 4, ncclFloat, right, comm, stream), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  sync();
  EXPECT_EQ(in.download(), ranked(left, 4));
}

// Pairs exchanging both ways (0↔1, 2↔3), several messages in a group, matched in order.
TEST_F(Nccl, SendRecvPairsMatchInOrder) {
  if (size % 2) GTEST_SKIP() << "needs an even number of ranks";
  const int peer = rank ^ 1;
  DeviceArray<float> a(ranked(rank, 3)), b(ranked(rank + 10, 2));
  DeviceArray<float> got_a(std::vector<float>(3, -1)), got_b(std::vector<float>(2, -1));
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclSend(a.get(), 3, ncclFloat, peer, comm, stream), ncclSuccess);
  ASSERT_EQ(ncclSend(b.get(), 2, ncclFloat, peer, comm, stream), ncclSuccess);
  ASSERT_EQ(ncclRecv(got_a.get(), 3, ncclFloat, peer, comm, stream), ncclSuccess);
  ASSERT_EQ(ncclRecv(got_b.get(), 2, ncclFloat, peer, comm, stream), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  sync();
  EXPECT_EQ(got_a.download(), ranked(peer, 3));
  EXPECT_EQ(got_b.download(), ranked(peer + 10, 2));
}

// A collective runs when its stream is drained, in stream order: queued behind it, a broadcast of
// its result sees the reduced values; nothing has changed before the synchronisation.
TEST_F(Nccl, OperationsRunInStreamOrderWhenDrained) {
  DeviceArray<float> d(ranked(rank, 3));
  ASSERT_EQ(ncclAllReduce(d.get(), d.get(), 3, ncclFloat, ncclSum, comm, stream), ncclSuccess);
  ASSERT_EQ(ncclBcast(d.get(), 3, ncclFloat, 0, comm, stream), ncclSuccess);
  sync();
  std::vector<float> want(3, 0);
  for (int r = 0; r < size; ++r)
    for (int i = 0; i < 3; ++i) want[i] += ranked(r, 3)[i];
  EXPECT_EQ(d.download(), want);
}

// The backend's known bug class: host memory (here, the stack) handed to a collective.
TEST_F(Nccl, HostPointersAreRefusedNamingTheCall) {
  float on_stack[4] = {1, 2, 3, 4};
  DeviceArray<float> device(std::vector<float>(4, 0));
  testing::internal::CaptureStderr();
  EXPECT_EQ(ncclAllReduce(on_stack, on_stack, 4, ncclFloat, ncclSum, comm, stream),
            ncclInvalidArgument);
  EXPECT_EQ(ncclBroadcast(device.get(), on_stack, 4, ncclFloat, 0, comm, stream),
            ncclInvalidArgument);
  EXPECT_EQ(ncclSend(on_stack, 4, ncclFloat, 0, comm, stream), ncclInvalidArgument);
  // One element past the end of a device allocation is not inside it.
  EXPECT_EQ(ncclReduce(device.get() + 1, device.get(), 4, ncclFloat, ncclSum, 0, comm, stream),
            ncclInvalidArgument);
  const std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_NE(printed.find("ncclAllReduce: sendbuff"), std::string::npos) << printed;
  EXPECT_NE(printed.find("ncclBroadcast: recvbuff"), std::string::npos) << printed;
  EXPECT_NE(printed.find("is not device memory"), std::string::npos) << printed;
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("ncclReduce: sendbuff"), std::string::npos);
  sync();
  EXPECT_EQ(device.download(), std::vector<float>(4, 0));
}

TEST_F(Nccl, ArgumentErrors) {
  DeviceArray<float> d(std::vector<float>(4, 0));
  testing::internal::CaptureStderr();
  EXPECT_EQ(ncclAllReduce(d.get(), d.get(), 4, ncclFloat, ncclSum, nullptr, stream),
            ncclInvalidArgument);
  EXPECT_EQ(
      ncclAllReduce(d.get(), d.get(), 4, ncclFloat, static_cast<ncclRedOp_t>(9), comm, stream),
      ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(d.get(), d.get(), 4, ncclFloat8e4m3, ncclSum, comm, stream),
            ncclInvalidArgument);
  EXPECT_EQ(ncclBroadcast(d.get(), d.get(), 4, ncclFloat, size, comm, stream), ncclInvalidArgument);
  EXPECT_EQ(ncclSend(d.get(), 4, ncclFloat, -1, comm, stream), ncclInvalidArgument);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  // An error inside a group fails its end, and nothing of the group runs.
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclRecv(d.get(), 4, ncclFloat, size + 3, comm, stream), ncclInvalidArgument);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
  ncclUniqueId bad{};
  ncclComm_t other = nullptr;
  EXPECT_EQ(ncclCommInitRank(&other, 1, bad, 0), ncclInvalidArgument);
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  EXPECT_EQ(ncclCommInitRank(&other, 2, id, 2), ncclInvalidArgument);
  testing::internal::GetCapturedStderr();
  EXPECT_STREQ(ncclGetErrorString(ncclSuccess), "no error");
  EXPECT_STRNE(ncclGetErrorString(ncclInvalidArgument), "");
  sync();
}

// A communicator of the odd world ranks only, made by them alone while the even ranks do
// something else (a collective over MPI_COMM_WORLD would hang here), then used.
TEST(NcclSubset, MembersAloneBuildTheirCommunicator) {
  if (g_world_size < 4) GTEST_SKIP() << "needs 4 ranks";
  const bool member = g_world_rank % 2 == 1;
  MPI_Comm odd;
  MPI_Comm_split(MPI_COMM_WORLD, member ? 1 : 0, g_world_rank, &odd);
  if (member) {
    int rank = 0, size = 0;
    MPI_Comm_rank(odd, &rank);
    MPI_Comm_size(odd, &size);
    ncclUniqueId id;
    if (rank == 0) {
      ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    }
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, odd);
    // Ranks in the reverse of world order: the NCCL rank, not the world rank, orders the result.
    const int nccl_rank = size - 1 - rank;
    ncclComm_t comm = nullptr;
    ASSERT_EQ(ncclCommInitRank(&comm, size, id, nccl_rank), ncclSuccess);
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    DeviceArray<float> send(std::vector<float>{1.0f * nccl_rank});
    DeviceArray<float> recv{std::vector<float>(size, -1)};
    ASSERT_EQ(ncclAllGather(send.get(), recv.get(), 1, ncclFloat, comm, stream), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<float> want(size);
    for (int r = 0; r < size; ++r) want[r] = r;
    EXPECT_EQ(recv.download(), want);
    cudaStreamDestroy(stream);
    ncclCommDestroy(comm);
  }
  MPI_Comm_free(&odd);
  MPI_Barrier(MPI_COMM_WORLD);
}

// Abort returns at once, without MPI (a peer may be dead), and ends a wait for peers that will
// never join: rank 0 queues an all-reduce the others never call, and a second thread aborts the
// communicator while the first waits in the stream's synchronisation. Run on its own (CTest
// emu_nccl_abort_*): the abandoned MPI request stays behind.
TEST_F(Nccl, AbortEndsAWaitNoPeerJoins) {
  DeviceArray<float> d(std::vector<float>(4, 1));
  if (rank == 0) {
    ASSERT_EQ(ncclAllReduce(d.get(), d.get(), 4, ncclFloat, ncclSum, comm, stream), ncclSuccess);
    if (size == 1) {  // one rank completes it alone: abort before it runs
      ASSERT_EQ(ncclCommAbort(comm), ncclSuccess);
      comm = nullptr;
      sync();
      return;
    }
    ncclComm_t aborted = comm;
    comm = nullptr;
    std::thread watchdog([aborted] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      EXPECT_EQ(ncclCommAbort(aborted), ncclSuccess);
    });
    const auto start = std::chrono::steady_clock::now();
    sync();
    watchdog.join();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  }
  if (g_mpi) MPI_Barrier(MPI_COMM_WORLD);
}

// A collective no peer joins: the emulated device gives up after BOOSTLM_EMULATOR_NCCL_HANG_S
// with a fault naming the call, instead of hanging (CTest emu_nccl_hang sets it and expects the
// message; without the variable this test skips).
TEST_F(Nccl, HangFaultsNamingTheCall) {
  if (!std::getenv("BOOSTLM_EMULATOR_NCCL_HANG_S")) GTEST_SKIP() << "run by emu_nccl_hang";
  if (size < 2) GTEST_SKIP() << "needs 2 ranks";
  DeviceArray<float> d(std::vector<float>(4, 1));
  if (rank == 0) {
    ASSERT_EQ(ncclAllReduce(d.get(), d.get(), 4, ncclFloat, ncclSum, comm, stream), ncclSuccess);
    sync();  // faults
    ADD_FAILURE() << "the lone all-reduce completed";
  }
  MPI_Barrier(MPI_COMM_WORLD);  // the others wait here until the fault ends the job
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  // Under mpirun only (Open MPI sets OMPI_COMM_WORLD_SIZE); alone, the tests run on one rank
  // without MPI.
  g_mpi = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  if (g_mpi) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_world_size);
  }
  testing::InitGoogleTest(&argc, argv);
  if (g_world_rank != 0) {  // the others print only their failures, naming their rank
    testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int result = RUN_ALL_TESTS();
  int worst = result;
  if (g_mpi) {
    MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (result != 0) std::fprintf(stderr, "[rank %d] tests failed\n", g_world_rank);
    MPI_Finalize();
  }
  return worst;
}
