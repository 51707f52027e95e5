// Collectives on 1, 2 and 4 ranks (ctest runs this file under mpirun -n 1/2/4 and without MPI):
// exact results and exact counts. All values are small integers or small multiples of 1/4, so every
// sum is exact in float/double whatever order MPI adds in, and results are compared with EXPECT_EQ.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_runtime.h"
#include "comm/overlap.h"
#include "comm_test_util.h"

namespace boostlm {
namespace {

using test::expect_counted;
using test::world_communicator;

TEST(CommCounts, DifferenceAndTotals) {
  CommCounts a, b;
  a[Collective::all_reduce] = {3, 120};
  a[Collective::send] = {2, 16};
  b[Collective::all_reduce] = {1, 40};
  const CommCounts d = a - b;
  EXPECT_EQ(d[Collective::all_reduce].calls, 2);
  EXPECT_EQ(d[Collective::all_reduce].bytes, 80);
  EXPECT_EQ(d[Collective::send].calls, 2);
  EXPECT_EQ(d[Collective::send].bytes, 16);
  EXPECT_EQ(d[Collective::recv].calls, 0);
  EXPECT_EQ(a.total_calls(), 5);
  EXPECT_EQ(a.total_bytes(), 136);
  EXPECT_EQ(d.total_bytes(), 96);
}

TEST(CommCounts, KindNames) {
  EXPECT_STREQ(to_string(Collective::all_reduce), "all_reduce");
  EXPECT_STREQ(to_string(Collective::all_reduce_max), "all_reduce_max");
  EXPECT_STREQ(to_string(Collective::all_gather), "all_gather");
  EXPECT_STREQ(to_string(Collective::reduce_scatter), "reduce_scatter");
  EXPECT_STREQ(to_string(Collective::broadcast), "broadcast");
  EXPECT_STREQ(to_string(Collective::send), "send");
  EXPECT_STREQ(to_string(Collective::recv), "recv");
}

// ---------------------------------------------------------------------------------------------
// The group of one process: no MPI involved, under mpirun or not.

void run_every_local_operation(Communicator& c) {
  std::vector<float> data = {1, -2, 3};
  c.all_reduce(data.data(), 3);
  c.all_reduce_max(data.data(), 3);
  EXPECT_EQ(data, (std::vector<float>{1, -2, 3}));
  std::vector<double> stats = {0.5, 4};
  c.all_reduce(stats.data(), 2);
  EXPECT_EQ(stats, (std::vector<double>{0.5, 4}));

  std::vector<float> gathered(3, 0);
  c.all_gather(data.data(), 3, gathered.data());
  EXPECT_EQ(gathered, data);
  c.all_gather(gathered.data(), 3, gathered.data());  // in place: this rank's slot is the input
  EXPECT_EQ(gathered, data);

  const std::vector<float> full = {1, 2, 3, 4, 5};
  std::vector<float> part(5, 0);
  c.reduce_scatter(full.data(), part.data(), {5});
  EXPECT_EQ(part, full);

  c.broadcast(data.data(), 3, 0);
  EXPECT_EQ(data, (std::vector<float>{1, -2, 3}));
  int control = 42;
  c.broadcast_bytes(&control, sizeof(control), 0);
  EXPECT_EQ(control, 42);
  c.barrier();

  CommRequest request = c.iall_reduce(data.data(), 3);
  EXPECT_FALSE(request.pending());
  EXPECT_TRUE(request.test());
  EXPECT_EQ(data, (std::vector<float>{1, -2, 3}));
}

TEST(SelfCommunicator, CollectivesAreLocalAndUncounted) {
  Communicator self;
  EXPECT_EQ(self.rank(), 0);
  EXPECT_EQ(self.size(), 1);
  EXPECT_EQ(self.name(), "self");
  run_every_local_operation(self);
  EXPECT_EQ(self.counts().total_calls(), 0);
  EXPECT_EQ(self.counts().total_bytes(), 0);
}

TEST(SelfCommunicator, NeedsNoMpi) {
  if (launched_by_mpi()) GTEST_SKIP() << "runs without mpirun (ctest: comm_serial)";
  Communicator self;
  run_every_local_operation(self);
  int initialised = 1;
  MPI_Initialized(&initialised);
  EXPECT_EQ(initialised, 0);
  EXPECT_FALSE(mpi_active());
  EXPECT_EQ(mpi_world_rank(), 0);
  EXPECT_EQ(mpi_world_size(), 1);
}

TEST(SelfCommunicator, MisuseIsAnAssertion) {
  if (mpi_active())
    GTEST_SKIP() << "death tests fork, which MPI does not allow (ctest: comm_serial)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Communicator self;
  float a[2] = {0, 0}, b[2] = {0, 0};
  EXPECT_DEATH(self.send(a, 1, 0, 0), "send on self: bad destination 0");
  EXPECT_DEATH(self.recv(a, 1, 0, 0), "recv on self: bad source 0");
  EXPECT_DEATH(self.isend(a, 1, 0, 0), "bad destination 0");
  EXPECT_DEATH(self.reduce_scatter(a, b, {1, 1}), "2 counts for a group of 1");
  EXPECT_DEATH(self.broadcast(a, 1, 1), "root out of range");
  EXPECT_DEATH(self.all_gather(a, int64_t{1} << 31, b), "does not fit an MPI int count");
  EXPECT_DEATH(self.all_gather(a, 2, a + 1), "send overlaps recv");
}

// ---------------------------------------------------------------------------------------------
// MPI_COMM_WORLD of the job (1, 2 or 4 ranks).

TEST(Communicator, AllReduceSum) {
  REQUIRE_MPI();
  Communicator world = world_communicator();
  const int n = world.size(), r = world.rank();
  EXPECT_EQ(n, mpi_world_size());
  EXPECT_EQ(r, mpi_world_rank());
  EXPECT_EQ(world.name(), "world");
  std::vector<float> data(7);
  for (int i = 0; i < 7; ++i) data[i] = 100.0f * r + i;
  world.all_reduce(data.data(), 7);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(data[i], 100.0f * n * (n - 1) / 2 + n * i) << i;
  expect_counted(world, Collective::all_reduce, 1, 7 * 4);
}

TEST(Communicator, AllReduceMax) {
  REQUIRE_MPI();
  Communicator world = world_communicator();
  const int n = world.size(), r = world.rank();
  std::vector<float> data(6);
  for (int i = 0; i < 6; ++i)
    data[i] = (i % 2 ? r : -r) + i;  // max: rank n-1 for odd i, 0 for even
  world.all_reduce_max(data.data(), 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(data[i], (i % 2 ? n - 1 : 0) + i) << i;
  expect_counted(world, Collective::all_reduce_max, 1, 6 * 4);
}

TEST(Communicator, AllReduceDoubleCountsEightBytes) {
  REQUIRE_MPI();
  Communicator world = world_communicator();
  const int n = world.size(), r = world.rank();
  std::vector<double> data(5);
  for (int i = 0; i < 5; ++i) data[i] = 0.25 * (r + 1) + i;
  world.all_reduce(data.data(), 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(data[i], 0.25 * n * (n + 1) / 2 + n * i) << i;
  expect_counted(world, Collective::all_reduce, 1, 5 * 8);
}

TEST(Communicator, AllGather) {
  REQUIRE_MPI();
  Communicator world = world_communicator();
  const int n = world.size(), r = world.rank();
  const std::vector<float> send = {10.0f * r, 10.0f * r + 1, 10.0f * r + 2};
  std::vector<float> recv(3 * n, -1);
  world.all_gather(send.data(), 3, recv.data());
  for (int j = 0; j < n; ++j) {
    for (int k = 0; k < 3; ++k) EXPECT_EQ(recv[3 * j + k], 10.0f * j + k) << j << "," << k;
  }
  expect_counted(world, Collective::all_gather, 1, 3 * 4);  // this rank's contribution
}

TEST(Communicator, AllGatherInPlace) {
  REQUIRE_MPI();
  Communicator world = world_communicator();
  const int n = world.size(), r = world.rank();
  std::vector<float> buffer(3 * n, -1);
  for (int k = 0; k < 3; ++k) buffer[3 * r + k] = 10.0f * r + k;
  world.all_gather(buffer.data() + 3 * r, 3, buffer.data());
  for (int j = 0; j < n; ++j) {
    for (int k = 0; k < 3; ++k) EXPECT_EQ(buffer[3 * j + k], 10.0f * j + k) << j << "," << k;
  }
  expect_counted(world, Collective::all_gather, 1, 3 * 4);
}

TEST(Communicator, ReduceScatterUnevenCounts) {
  REQUIRE_MPI();
  Communicator world = world_communicator();
  const int n = world.size(), r = world.rank();
  ASSERT_LE(n, 4);
  const std::vector<int64_t> table = {3, 1, 0, 2};  // uneven, and rank 2 receives nothing
  const std::vector<int64_t> counts(table.begin(), table.begin() + n);
  int64_t total = 0, offset = 0;
  for (int j = 0; j < n; ++j) {
    if (j == r) offset = total;
    total += counts[j];
  }
  std::vector<float> send(total);
  for (int64_t j = 0; j < total; ++j) send[j] = static_cast<float>((r + 1) * (j + 1));
  std::vector<float> recv(counts[r] + 1, -1);  // one guard element that must stay untouched
  world.reduce_scatter(send.data(), recv.data(), counts);
  const float rank_sum = n * (n + 1) / 2.0f;  // Σ (r + 1)
  for (int64_t k = 0; k < counts[r]; ++k) EXPECT_EQ(recv[k], (offset + k + 1) * rank_sum) << k;
  EXPECT_EQ(recv[counts[r]], -1);
  expect_counted(world, Collective::reduce_scatter, 1, total * 4);  // the full send buffer
}

TEST(Communicator, BroadcastCountedBroadcastBytesNot) {
  REQUIRE_MPI();
  Communicator world = world_communicator();
  const int n = world.size(), r = world.rank(), root = n - 1;
  std::vector<float> data(4, -1);
  if (r == root) data = {7, 8, 9, 10};
  world.broadcast(data.data(), 4, root);
  EXPECT_EQ(data, (std::vector<float>{7, 8, 9, 10}));
  expect_counted(world, Collective::broadcast, 1, 4 * 4);

  struct Control {
    int64_t step;
    double loss;
  } control = {r == root ? 12 : 0, r == root ? 2.5 : 0};
  world.broadcast_bytes(&control, sizeof(control), root);
  EXPECT_EQ(control.step, 12);
  EXPECT_EQ(control.loss, 2.5);
  expect_counted(world, Collective::broadcast, 1, 4 * 4);  // unchanged: control data is not counted
}

TEST(Communicator, SendRecvRing) {
  REQUIRE_MPI();
  Communicator world = world_communicator();
  const int n = world.size(), r = world.rank();
  if (n == 1) GTEST_SKIP() << "point-to-point needs two ranks";
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  std::vector<float> out(5), in(5, -1);
  for (int i = 0; i < 5; ++i) out[i] = 1000.0f * r + i;
  if (r % 2 == 0) {  // even ranks send first, odd ranks receive first: no cycle of blocked sends
    world.send(out.data(), 5, right, 7);
    world.recv(in.data(), 5, left, 7);
  } else {
    world.recv(in.data(), 5, left, 7);
    world.send(out.data(), 5, right, 7);
  }
  for (int i = 0; i < 5; ++i) EXPECT_EQ(in[i], 1000.0f * left + i) << i;
  EXPECT_EQ(world.counts()[Collective::send].calls, 1);
  EXPECT_EQ(world.counts()[Collective::send].bytes, 5 * 4);
  EXPECT_EQ(world.counts()[Collective::recv].calls, 1);
  EXPECT_EQ(world.counts()[Collective::recv].bytes, 5 * 4);
  EXPECT_EQ(world.counts().total_calls(), 2);
}

TEST(Communicator, IAllReduceProgressesByTestPolling) {
  REQUIRE_MPI();
  Communicator world = world_communicator();
  const int n = world.size(), r = world.rank();
  const int64_t count = int64_t{1} << 20;  // large enough to be in flight for a while
  std::vector<float> data(count);
  for (int64_t i = 0; i < count; ++i) data[i] = static_cast<float>(r + i % 7);
  CommRequest request = world.iall_reduce(data.data(), count);
  expect_counted(world, Collective::all_reduce, 1, count * 4);  // counted when started
  EXPECT_EQ(request.pending(), n > 1);
  int64_t polls = 0;
  volatile double work = 0;  // stands for the computation that overlaps the collective
  while (!request.test()) {
    for (int i = 0; i < 1000; ++i) work = work + 1.0;
    ++polls;
  }
  EXPECT_FALSE(request.pending());
  EXPECT_TRUE(request.test());  // a finished request stays finished
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(data[i], n * (n - 1) / 2.0f + n * (i % 7)) << i;
  }
  if (r == 0)
    std::printf("  iall_reduce of %lld floats finished after %lld polls\n",
                static_cast<long long>(count), static_cast<long long>(polls));
}

// Overlapped collectives of several chunks (comm/overlap.h), among them buffers larger than the
// eager limit, which two ranks exchange in several messages: every result is exact, and the
// counts are those of the blocking calls.
TEST(Communicator, OverlappedCollectivesLargerThanOneMessageAreExact) {
  REQUIRE_MPI();
  if (!mpi_thread_multiple()) GTEST_SKIP() << "needs MPI_THREAD_MULTIPLE";
  Communicator world = world_communicator();
  const int n = world.size(), r = world.rank();
  const int64_t large = CommOverlap::kEagerBytes / 4 * 5 / 2 + 3;  // 2.5 messages and a bit
  std::vector<std::vector<float>> sums(2), maxima(2);
  for (int c = 0; c < 2; ++c) {
    sums[c].resize(large);
    maxima[c].resize(1000);
    for (int64_t i = 0; i < large; ++i) sums[c][i] = static_cast<float>((r + c + i) % 11);
    for (int64_t i = 0; i < 1000; ++i) maxima[c][i] = static_cast<float>((r * 7 + i + c) % 13);
  }
  CommOverlap overlap(world);
  world.reset_counts();
  std::vector<std::function<void()>> tasks;
  for (int c = 0; c < 2; ++c)
    tasks.emplace_back([&, c] {
      world.all_reduce(sums[c].data(), large);
      world.all_reduce_max(maxima[c].data(), 1000);
    });
  overlap.run(tasks);
  for (int c = 0; c < 2; ++c) {
    for (int64_t i = 0; i < large; ++i) {
      float want = 0;
      for (int q = 0; q < n; ++q) want += static_cast<float>((q + c + i) % 11);
      ASSERT_EQ(sums[c][i], want) << "chunk " << c << " element " << i;
    }
    for (int64_t i = 0; i < 1000; ++i) {
      float want = 0;
      for (int q = 0; q < n; ++q) want = std::max(want, static_cast<float>((q * 7 + i + c) % 13));
      ASSERT_EQ(maxima[c][i], want) << "chunk " << c << " element " << i;
    }
  }
  const bool counted = n > 1;
  EXPECT_EQ(world.counts()[Collective::all_reduce].calls, counted ? 2 : 0);
  EXPECT_EQ(world.counts()[Collective::all_reduce].bytes, counted ? 2 * large * 4 : 0);
  EXPECT_EQ(world.counts()[Collective::all_reduce_max].calls, counted ? 2 : 0);
  EXPECT_EQ(world.counts()[Collective::all_reduce_max].bytes, counted ? 2 * 1000 * 4 : 0);
  EXPECT_EQ(overlap.stats().collectives, counted ? 4 : 0);
}

TEST(Communicator, CommRequestDestructorWaits) {
  REQUIRE_MPI();
  Communicator world = world_communicator();
  const int n = world.size(), r = world.rank();
  std::vector<float> data(1 << 16, static_cast<float>(r + 1));
  { CommRequest request = world.iall_reduce(data.data(), 1 << 16); }
  for (float x : data) ASSERT_EQ(x, n * (n + 1) / 2.0f);
  // Move-assigning over a pending request finishes the old one first.
  std::vector<float> first(256, 1.0f), second(256, 2.0f);
  CommRequest request = world.iall_reduce(first.data(), 256);
  request = world.iall_reduce(second.data(), 256);
  for (float x : first) ASSERT_EQ(x, 1.0f * n);
  request.wait();
  for (float x : second) ASSERT_EQ(x, 2.0f * n);
  expect_counted(world, Collective::all_reduce, 3, ((1 << 16) + 512) * 4);
}

TEST(Communicator, ISendIRecvRing) {
  REQUIRE_MPI();
  Communicator world = world_communicator();
  const int n = world.size(), r = world.rank();
  if (n == 1) GTEST_SKIP() << "point-to-point needs two ranks";
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  const int64_t count = 100000;  // beyond the eager limit: needs a rendezvous, so progress matters
  std::vector<float> out(count), in(count, -1);
  for (int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(r * count + i % 1000);
  CommRequest receive = world.irecv(in.data(), count, left, 3);
  CommRequest send = world.isend(out.data(), count, right, 3);
  while (!(receive.test() & send.test())) {  // `&`: poll both every time
  }
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(in[i], static_cast<float>(left * count + i % 1000));
  EXPECT_EQ(world.counts()[Collective::send].calls, 1);
  EXPECT_EQ(world.counts()[Collective::send].bytes, count * 4);
  EXPECT_EQ(world.counts()[Collective::recv].calls, 1);
  EXPECT_EQ(world.counts()[Collective::recv].bytes, count * 4);
  EXPECT_EQ(world.counts().total_calls(), 2);
}

TEST(Communicator, LargeAllReduce) {
  REQUIRE_MPI();
  Communicator world = world_communicator();
  const int n = world.size(), r = world.rank();
  const int64_t count = int64_t{1} << 22;  // 16 MiB: shared-memory single-copy path
  std::vector<float> data(count, static_cast<float>(r + 1));
  world.all_reduce(data.data(), count);
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(data[i], n * (n + 1) / 2.0f) << i;
  expect_counted(world, Collective::all_reduce, 1, count * 4);
}

TEST(Communicator, CountsAccumulateSubtractAndReset) {
  REQUIRE_MPI();
  Communicator world = world_communicator();
  const int n = world.size();
  std::vector<float> data(16, 1), gathered(2 * n);
  world.all_reduce(data.data(), 3);
  world.all_reduce(data.data(), 5);
  world.all_gather(data.data(), 2, gathered.data());
  world.broadcast(data.data(), 4, 0);
  const int64_t k = n > 1;  // nothing is counted in a group of one
  EXPECT_EQ(world.counts()[Collective::all_reduce].calls, 2 * k);
  EXPECT_EQ(world.counts()[Collective::all_reduce].bytes, 32 * k);
  EXPECT_EQ(world.counts()[Collective::all_gather].bytes, 8 * k);
  EXPECT_EQ(world.counts()[Collective::broadcast].bytes, 16 * k);
  EXPECT_EQ(world.counts().total_calls(), 4 * k);
  EXPECT_EQ(world.counts().total_bytes(), 56 * k);

  const CommCounts before = world.counts();
  world.all_reduce(data.data(), 10);
  const CommCounts step = world.counts() - before;
  EXPECT_EQ(step[Collective::all_reduce].calls, 1 * k);
  EXPECT_EQ(step.total_bytes(), 40 * k);
  EXPECT_EQ(step.total_calls(), 1 * k);

  world.reset_counts();
  EXPECT_EQ(world.counts().total_calls(), 0);
  EXPECT_EQ(world.counts().total_bytes(), 0);
}

TEST(Communicator, MoveKeepsTheGroupAndItsCounts) {
  REQUIRE_MPI();
  Communicator first = world_communicator();
  const int n = first.size();
  float x = 1;
  first.all_reduce(&x, 1);
  Communicator moved(std::move(first));
  EXPECT_EQ(moved.size(), n);
  EXPECT_EQ(moved.name(), "world");
  x = 1;
  moved.all_reduce(&x, 1);
  EXPECT_EQ(x, n);
  Communicator assigned;
  assigned = std::move(moved);
  x = 1;
  assigned.all_reduce(&x, 1);
  EXPECT_EQ(x, n);
  expect_counted(assigned, Collective::all_reduce, 3, 3 * 4);
}


// ---------------------------------------------------------------------------------------------
// bf16 activations (issue 60, comm/bf16_sum.h).

TEST(Bf16Sum, WidensAddsInFp32AndRoundsOnce) {
  // 1 + 2⁻⁸ is not a bf16 (8 significant bits): the sum of 1 and 2⁻⁸ rounds to nearest even, 1;
  // 1 + 3·2⁻⁸ rounds up to 1 + 2⁻⁶ … each against float_to_bf16 of the fp32 sum.
  const std::vector<float> a = {1.0f, 1.0f, -3.5f, 1e-3f, 65504.0f, 0.0f};
  const std::vector<float> b = {0.00390625f, 0.01171875f, 1.25f, -1e-3f, 65504.0f, -0.0f};
  std::vector<bf16_t> x(a.size()), y(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    x[i] = float_to_bf16(a[i]);
    y[i] = float_to_bf16(b[i]);
  }
  std::vector<bf16_t> sum = y;
  sum_bf16(x.data(), sum.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(sum[i], float_to_bf16(bf16_to_float(x[i]) + bf16_to_float(y[i]))) << i;
  EXPECT_EQ(bf16_to_float(sum[0]), 1.0f);
}

TEST(Bf16Sum, RowFormats) {
  // Host rows: the values padded to an even count, then the statistics, 4-byte aligned.
  const RowMessage odd = interleaved_rows(3, 5, 1);
  EXPECT_EQ(odd.values_ld, 8);      // 5 values + 1 pad + 2 slots of fp32
  EXPECT_EQ(odd.stats_offset, 12);  // bytes
  EXPECT_EQ(odd.stats_ld, 4);       // floats
  EXPECT_EQ(odd.bytes, 3 * 16);
  EXPECT_EQ(odd.payload_bytes(), 3 * (5 * 2 + 4));
  const RowMessage plain = interleaved_rows(4, 6, 0);
  EXPECT_EQ(plain.values_ld, 6);
  EXPECT_EQ(plain.bytes, 4 * 12);
  // Device rows: every value, then every statistic at a 256-byte boundary.
  const RowMessage split = split_rows(3, 5, 1);
  EXPECT_FALSE(split.interleaved);
  EXPECT_EQ(split.values_ld, 5);
  EXPECT_EQ(split.stats_offset, 256);
  EXPECT_EQ(split.stats_ld, 1);
  EXPECT_EQ(split.bytes, 256 + 12);
  EXPECT_EQ(split.payload_bytes(), odd.payload_bytes());
}

// Each rank's value of element i: bf16 values of mixed signs and magnitudes.
float bf16_test_value(int rank, int64_t i) {
  return bf16_to_float(
      float_to_bf16(std::ldexp(static_cast<float>(((i * 37 + rank * 11) % 23) - 11), -(i % 9)) +
                    0.1f * rank));
}

TEST(Communicator, AllReduceBf16IsTheFp32SumRoundedPerStepCountedTwoBytes) {
  REQUIRE_MPI();
  Communicator world = world_communicator();
  const int n = world.size(), r = world.rank();
  const int64_t count = 1001;
  std::vector<bf16_t> data(count);
  for (int64_t i = 0; i < count; ++i) data[i] = float_to_bf16(bf16_test_value(r, i));
  world.all_reduce(data.data(), count);
  for (int64_t i = 0; i < count; ++i) {
    double exact = 0, magnitude = 0;
    for (int q = 0; q < n; ++q) {
      exact += bf16_test_value(q, i);
      magnitude += std::abs(bf16_test_value(q, i));
    }
    const float got = bf16_to_float(data[i]);
    if (n <= 2) {  // one rounding of the fp32 sum (exact in fp32 here)
      ASSERT_EQ(data[i], float_to_bf16(static_cast<float>(exact))) << i;
    } else {  // (t − 1) roundings of partial sums, each at most 2⁻⁸ of Σ|x| (comm/bf16_sum.h)
      ASSERT_LE(std::abs(got - exact), (n - 1) * std::ldexp(magnitude, -8) + 1e-30) << i;
    }
  }
  // The same bits on every rank.
  std::vector<bf16_t> first = data;
  world.broadcast_bytes(first.data(), count * 2, 0);
  EXPECT_EQ(first, data);
  expect_counted(world, Collective::all_reduce, 1, count * 2);
}

TEST(Communicator, RowMessageSumsValuesInBf16AndStatisticsExactlyInOneCollective) {
  REQUIRE_MPI();
  Communicator world = world_communicator();
  const int n = world.size(), r = world.rank();
  for (const int64_t values : {int64_t{7}, int64_t{8}}) {  // odd: the padded row
    const int64_t rows = 33;
    const RowMessage m = world.row_message(rows, values, 1);
    EXPECT_TRUE(m.interleaved);
    std::vector<char> buffer(m.bytes);
    // Statistics a bf16 could not carry: 1 + r·2⁻²⁰, exact in fp32 sums of up to 4 ranks.
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t c = 0; c < values; ++c)
        m.values_in(buffer.data())[row * m.values_ld + c] =
            float_to_bf16(bf16_test_value(r, row * values + c));
      m.stats_in(buffer.data())[row * m.stats_ld] = 1.0f + std::ldexp(float(r + row), -20);
    }
    world.reset_counts();
    world.all_reduce_rows(buffer.data(), m);
    for (int64_t row = 0; row < rows; ++row) {
      float want = 0;
      for (int q = 0; q < n; ++q) want += 1.0f + std::ldexp(float(q + row), -20);
      ASSERT_EQ(m.stats_in(buffer.data())[row * m.stats_ld], want) << row;
      for (int64_t c = 0; c < values && n <= 2; ++c) {
        float sum = 0;
        for (int q = 0; q < n; ++q) sum += bf16_test_value(q, row * values + c);
        ASSERT_EQ(m.values_in(buffer.data())[row * m.values_ld + c], float_to_bf16(sum))
            << row << " " << c;
      }
    }
    expect_counted(world, Collective::all_reduce, 1, rows * (2 * values + 4));
  }
}

// Inside --tp-overlap's tasks the bf16 sums are the same bits as a blocking call's.
TEST(Communicator, OverlappedBf16AndRowMessagesMatchBlockingCalls) {
  REQUIRE_MPI();
  if (!mpi_thread_multiple()) GTEST_SKIP() << "needs MPI_THREAD_MULTIPLE";
  Communicator world = world_communicator();
  const int r = world.rank();
  const int64_t count = CommOverlap::kEagerBytes / 2 + 5;  // more than one message
  const int64_t rows = 17, values = 9;
  const RowMessage m = world.row_message(rows, values, 1);
  auto fill = [&](std::vector<bf16_t>& v, std::vector<char>& msg) {
    v.resize(count);
    for (int64_t i = 0; i < count; ++i) v[i] = float_to_bf16(bf16_test_value(r, i));
    msg.assign(m.bytes, 0);
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t c = 0; c < values; ++c)
        m.values_in(msg.data())[row * m.values_ld + c] = float_to_bf16(bf16_test_value(r, c + row));
      m.stats_in(msg.data())[row * m.stats_ld] = 0.5f + std::ldexp(float(r), -22);
    }
  };
  std::vector<bf16_t> blocking, overlapped;
  std::vector<char> blocking_rows, overlapped_rows;
  fill(blocking, blocking_rows);
  fill(overlapped, overlapped_rows);
  world.all_reduce(blocking.data(), count);
  world.all_reduce_rows(blocking_rows.data(), m);
  CommOverlap overlap(world);
  world.reset_counts();
  overlap.run({[&] {
    world.all_reduce(overlapped.data(), count);
    world.all_reduce_rows(overlapped_rows.data(), m);
  }});
  if (world.size() <= 2) {  // the same exchange and sums: the same bits
    EXPECT_EQ(overlapped, blocking);
    EXPECT_EQ(overlapped_rows, blocking_rows);
  } else {  // libnbc's algorithm may add in another order: within the bound of comm/bf16_sum.h
    const int n = world.size();
    for (int64_t i = 0; i < count; ++i) {
      float magnitude = 0;
      for (int q = 0; q < n; ++q) magnitude += std::abs(bf16_test_value(q, i));
      const float a = bf16_to_float(overlapped[i]), b = bf16_to_float(blocking[i]);
      ASSERT_LE(std::abs(a - b), 2 * (n - 1) * std::ldexp(magnitude, -8)) << i;
    }
    for (int64_t row = 0; row < rows; ++row)
      EXPECT_EQ(m.stats_in(overlapped_rows.data())[row * m.stats_ld],
                m.stats_in(blocking_rows.data())[row * m.stats_ld]);
  }
  const bool counted = world.size() > 1;
  EXPECT_EQ(world.counts()[Collective::all_reduce].calls, counted ? 2 : 0);
  EXPECT_EQ(world.counts()[Collective::all_reduce].bytes,
            counted ? count * 2 + m.payload_bytes() : 0);
}

}  // namespace
}  // namespace boostlm
