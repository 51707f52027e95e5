// Device collectives without a device (comm/transport.h): the reduce-scatter decomposition, the
// NCCL bootstrap's message flow, the choice of GPU and transport, the watched poll that covers
// NCCL, and, under mpirun (comm_np1/2/4), every collective through the staged path and through a
// stand-in for NCCL that runs NCCL's decomposition over MPI, against the host path: the same
// results and exactly the same counts. "Device" memory is host memory here (HostCopier).
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
#include "comm/mpi_runtime.h"
#include "comm/staged_transport.h"
#include "comm/transport.h"
#include "comm/watchdog.h"
#include "comm_test_util.h"
#include "core/error.h"

namespace boostlm {
namespace {

using test::world_communicator;

// ---------------------------------------------------------------------------------------------
// Host functions (comm_serial).

TEST(Transport, ReduceScatterEqualCountsIsOneReduceScatter) {
  const ReduceScatterPlan plan = plan_reduce_scatter({4, 4, 4});
  EXPECT_TRUE(plan.equal);
  EXPECT_EQ(plan.block, 4);
  EXPECT_TRUE(plan.pieces.empty());
  EXPECT_TRUE(plan_reduce_scatter({0, 0}).equal);
  EXPECT_EQ(plan_reduce_scatter({5}).block, 5);
}

TEST(Transport, ReduceScatterUnevenCountsIsOneReducePerNonEmptyRank) {
  const ReduceScatterPlan plan = plan_reduce_scatter({3, 1, 0, 2});
  EXPECT_FALSE(plan.equal);
  ASSERT_EQ(plan.pieces.size(), 3u);  // rank 2 receives nothing: no Reduce rooted there
  EXPECT_EQ(plan.pieces[0].root, 0);
  EXPECT_EQ(plan.pieces[0].offset, 0);
  EXPECT_EQ(plan.pieces[0].count, 3);
  EXPECT_EQ(plan.pieces[1].root, 1);
  EXPECT_EQ(plan.pieces[1].offset, 3);
  EXPECT_EQ(plan.pieces[1].count, 1);
  EXPECT_EQ(plan.pieces[2].root, 3);
  EXPECT_EQ(plan.pieces[2].offset, 4);
  EXPECT_EQ(plan.pieces[2].count, 2);
}

// Every element of the send buffer belongs to exactly one piece, the one rooted at its owner.
TEST(Transport, ReduceScatterPiecesCoverTheBufferOnce) {
  const std::vector<int64_t> counts = {7, 0, 0, 5, 1, 9, 2};
  const ReduceScatterPlan plan = plan_reduce_scatter(counts);
  std::vector<int> owner(24, -1);
  for (const ReducePiece& piece : plan.pieces)
    for (int64_t i = piece.offset; i < piece.offset + piece.count; ++i) {
      EXPECT_EQ(owner[i], -1) << i;
      owner[i] = piece.root;
    }
  int64_t i = 0;
  for (int rank = 0; rank < static_cast<int>(counts.size()); ++rank)
    for (int64_t k = 0; k < counts[rank]; ++k) EXPECT_EQ(owner[i++], rank);
  EXPECT_EQ(i, 24);
}

TEST(Transport, BootstrapOnOneRankMakesAndUsesTheId) {
  Communicator self;
  int made = 0, initialised = 0;
  UniqueId seen{};
  bootstrap_unique_id(
      self,
      [&] {
        ++made;
        UniqueId id{};
        id[0] = 'x';
        id[kUniqueIdBytes - 1] = 'y';
        return id;
      },
      [&](const UniqueId& id) {
        ++initialised;
        seen = id;
      });
  EXPECT_EQ(made, 1);
  EXPECT_EQ(initialised, 1);
  EXPECT_EQ(seen[0], 'x');
  EXPECT_EQ(seen[kUniqueIdBytes - 1], 'y');
  EXPECT_EQ(self.counts().total_calls(), 0);
}

TEST(Transport, DeviceByLocalRank) {
  EXPECT_EQ(device_for_local_rank(0, 1), 0);
  EXPECT_EQ(device_for_local_rank(1, 1), 0);  // ranks sharing one GPU (the staged path)
  EXPECT_EQ(device_for_local_rank(5, 4), 1);
  EXPECT_EQ(device_for_local_rank(3, 8), 3);
  try {
    device_for_local_rank(0, 0);
    FAIL() << "no devices must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no GPU is visible"), std::string::npos) << e.what();
  }
}

TEST(Transport, LocalRankFromTheLaunchersEnvironment) {
  auto env = [](std::vector<std::pair<const char*, const char*>> values) {
    return [values](const char* name) -> const char* {
      for (const auto& [key, value] : values)
        if (std::string(key) == name) return value;
      return nullptr;
    };
  };
  // No variable: MPI's own shared-memory split (0 in one process; this rank's under mpirun).
  EXPECT_EQ(local_rank_from_env(env({})), mpi_local_rank());
  EXPECT_EQ(local_rank_from_env(env({{"OMPI_COMM_WORLD_LOCAL_RANK", "3"}})), 3);
  EXPECT_EQ(local_rank_from_env(env({{"MPI_LOCALRANKID", "2"}})), 2);
  EXPECT_EQ(
      local_rank_from_env(env({{"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"MPI_LOCALRANKID", "5"}})), 1);
  // srun sets no OMPI_ variable, and SLURM_LOCALID is the rank's; under mpirun inside an
  // allocation SLURM_LOCALID is the daemon's (0 for every rank), so Open MPI's comes first.
  EXPECT_EQ(local_rank_from_env(env({{"SLURM_LOCALID", "1"}})), 1);
  EXPECT_EQ(local_rank_from_env(env({{"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"SLURM_LOCALID", "0"}})),
            1);
  EXPECT_THROW(local_rank_from_env(env({{"OMPI_COMM_WORLD_LOCAL_RANK", "one"}})), Error);
  EXPECT_THROW(local_rank_from_env(env({{"OMPI_COMM_WORLD_LOCAL_RANK", "-1"}})), Error);
}

TEST(Transport, NcclRequestedByEnvironment) {
  EXPECT_TRUE(nccl_requested(nullptr));
  EXPECT_TRUE(nccl_requested(""));
  EXPECT_TRUE(nccl_requested("1"));
  EXPECT_FALSE(nccl_requested("0"));
  try {
    nccl_requested("yes");
    FAIL() << "a malformed value must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("BOOSTLM_NCCL=yes"), std::string::npos) << e.what();
  }
}

// The wait on a device operation (NCCL's): polls until done; past the timeout, aborts the
// communicator, then ends the process with the watchdog's message and exit code.
TEST(WatchedPoll, ReturnsOnceThePollSaysDone) {
  int polls = 0, aborts = 0;
  watched_poll(
      "tp", "all_reduce", 64, [&] { return ++polls == 5; }, [&] { ++aborts; });
  EXPECT_EQ(polls, 5);
  EXPECT_EQ(aborts, 0);
}

TEST(WatchedPoll, AbortsThenEndsTheJobOnAHungOperation) {
  if (mpi_active()) GTEST_SKIP() << "death tests fork, which MPI does not allow (comm_serial)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        configure_watchdog(0.2);
        set_watchdog_step(3);
        watched_poll(
            intern_group_name("tp"), "all_reduce", 64, [] { return false; },
            [] { std::fputs("fake ncclCommAbort\n", stderr); });
        std::exit(0);
      },
      testing::ExitedWithCode(kWatchdogExitCode),
      "fake ncclCommAbort(.|\n)*communication watchdog: all_reduce of 64 bytes on group tp has "
      "not completed within 0.2 s \\(training step 3\\)");
}

TEST(WatchedPoll, QuietWhenTheOperationCompletesInTime) {
  if (mpi_active()) GTEST_SKIP() << "death tests fork, which MPI does not allow (comm_serial)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        configure_watchdog(0.2);
        for (int i = 0; i < 10; ++i) {  // 0.5 s in all, each well inside the timeout
          const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
          watched_poll(
              "dp", "all_reduce", 4, [&] { return std::chrono::steady_clock::now() >= until; },
              [] { std::fputs("aborted\n", stderr); });
        }
        std::exit(0);
      },
      testing::ExitedWithCode(0), "");
}

// ---------------------------------------------------------------------------------------------
// A stand-in for NCCL: NcclTransport's structure (the reduce-scatter plan, send/recv, ops started
// and completed later) over MPI on host memory. Its completions report not-ready for a few polls.

class DeferredCompletion final : public DeviceCompletion {
 public:
  bool ready() override { return ++polls_ > 2; }
  void wait() override { polls_ = 3; }

 private:
  int polls_ = 0;
};

class MpiStandInTransport final : public DeviceTransport {
 public:
  explicit MpiStandInTransport(Communicator& group)
      : comm_(static_cast<MPI_Comm>(group.mpi_comm())), rank_(group.rank()) {}
  const char* kind() const override { return "stand-in"; }
  int reduce_calls = 0, reduce_scatter_calls = 0;

  Started all_reduce(void* data, int64_t count, ElementType type, ReduceOp op) override {
    MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count),
                  type == ElementType::f64 ? MPI_DOUBLE : MPI_FLOAT,
                  op == ReduceOp::max ? MPI_MAX : MPI_SUM, comm_);
    return std::make_unique<DeferredCompletion>();
  }
  Started all_reduce_rows(void*, const RowMessage&) override {
    ADD_FAILURE() << "the stand-in has no row messages";
    return nullptr;
  }
  Started all_gather(const float* send, int64_t count, float* recv) override {
    const bool in_place = send == recv + rank_ * count;
    MPI_Allgather(in_place ? MPI_IN_PLACE : send, static_cast<int>(count), MPI_FLOAT, recv,
                  static_cast<int>(count), MPI_FLOAT, comm_);
    return nullptr;
  }
  Started reduce_scatter(const float* send, float* recv,
                         const std::vector<int64_t>& counts) override {
    const ReduceScatterPlan plan = plan_reduce_scatter(counts);
    if (plan.equal) {
      ++reduce_scatter_calls;
      MPI_Reduce_scatter_block(send, recv, static_cast<int>(plan.block), MPI_FLOAT, MPI_SUM, comm_);
      return nullptr;
    }
    for (const ReducePiece& piece : plan.pieces) {
      ++reduce_calls;
      MPI_Reduce(send + piece.offset, piece.root == rank_ ? recv : nullptr,
                 static_cast<int>(piece.count), MPI_FLOAT, MPI_SUM, piece.root, comm_);
    }
    return std::make_unique<DeferredCompletion>();
  }
  Started broadcast(float* data, int64_t count, int root) override {
    MPI_Bcast(data, static_cast<int>(count), MPI_FLOAT, root, comm_);
    return nullptr;
  }
  Started send(const void* data, int64_t count, ElementType type, int peer, int tag) override {
    MPI_Request request;
    MPI_Isend(data, static_cast<int>(count), type == ElementType::bf16 ? MPI_UINT16_T : MPI_FLOAT,
              peer, tag, comm_, &request);
    return std::make_unique<MpiCompletion>(request);
  }
  Started recv(void* data, int64_t count, ElementType type, int peer, int tag) override {
    MPI_Request request;
    MPI_Irecv(data, static_cast<int>(count), type == ElementType::bf16 ? MPI_UINT16_T : MPI_FLOAT,
              peer, tag, comm_, &request);
    return std::make_unique<MpiCompletion>(request);
  }

 private:
  class MpiCompletion final : public DeviceCompletion {
   public:
    explicit MpiCompletion(MPI_Request request) : request_(request) {}
    bool ready() override {
      int done = 0;
      MPI_Test(&request_, &done, MPI_STATUS_IGNORE);
      return done != 0;
    }
    void wait() override { MPI_Wait(&request_, MPI_STATUS_IGNORE); }

   private:
    MPI_Request request_;
  };
  MPI_Comm comm_;
  int64_t rank_;
};

// One call of every kind (and the non-blocking ones), on values whose sums are exact in float and
// double; returns every buffer afterwards, in order.
std::vector<std::vector<double>> run_sequence(Communicator& c) {
  const int n = c.size(), r = c.rank();
  std::vector<std::vector<double>> out;
  auto keep = [&](const auto& v) { out.emplace_back(v.begin(), v.end()); };

  std::vector<float> sum(5);
  for (int i = 0; i < 5; ++i) sum[i] = 10.0f * r + i;
  c.all_reduce(sum.data(), 5);
  keep(sum);
  std::vector<float> max(4);
  for (int i = 0; i < 4; ++i) max[i] = (i % 2 ? r : -r) + 0.25f * i;
  c.all_reduce_max(max.data(), 4);
  keep(max);
  std::vector<double> stats = {0.5 * r, 2.0 + r};
  c.all_reduce(stats.data(), 2);
  keep(stats);

  std::vector<float> gathered(3 * n, -1);
  const std::vector<float> mine = {1.0f * r, 2.0f * r, 3.0f + r};
  c.all_gather(mine.data(), 3, gathered.data());
  keep(gathered);
  std::vector<float> in_place(2 * n, -1);
  in_place[2 * r] = 7.0f + r;
  in_place[2 * r + 1] = -1.0f * r;
  c.all_gather(in_place.data() + 2 * r, 2, in_place.data());
  keep(in_place);

  const std::vector<int64_t> table = {3, 1, 0, 2};  // uneven, and rank 2 receives nothing
  const std::vector<int64_t> uneven(table.begin(), table.begin() + n);
  const std::vector<int64_t> even(n, 2);
  for (const auto& counts : {uneven, even}) {
    int64_t total = 0;
    for (int64_t k : counts) total += k;
    std::vector<float> send(total);
    for (int64_t i = 0; i < total; ++i) send[i] = 1.0f * (r + 1) * (i + 1);
    std::vector<float> recv(counts[r] + 1, -5);  // one guard element past this rank's part
    c.reduce_scatter(send.data(), recv.data(), counts);
    keep(recv);
  }

  std::vector<float> broadcast = {r + 0.5f, -r - 0.5f, 9};
  c.broadcast(broadcast.data(), 3, n - 1);
  keep(broadcast);

  if (n > 1) {  // a ring, non-blocking (each rank receives from its left, sends to its right)
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    std::vector<float> from_left(6, -1), to_right(6);
    for (int i = 0; i < 6; ++i) to_right[i] = 100.0f * r + i;
    CommRequest got = c.irecv(from_left.data(), 6, left, 11);
    CommRequest sent = c.isend(to_right.data(), 6, right, 11);
    sent.wait();
    while (!got.test()) {
    }
    keep(from_left);
    if (r == 0) c.send(to_right.data(), 2, 1, 12);  // blocking, 0 → 1
    if (r == 1) {
      std::vector<float> got_blocking(2, -1);
      c.recv(got_blocking.data(), 2, 0, 12);
      keep(got_blocking);
    }
  }
  std::vector<float> overlapped(3, 1.0f + r);
  CommRequest request = c.iall_reduce(overlapped.data(), 3);
  request.wait();
  keep(overlapped);
  return out;
}

void expect_same_counts(const CommCounts& a, const CommCounts& b) {
  for (int k = 0; k < kCollectiveKinds; ++k) {
    const auto kind = static_cast<Collective>(k);
    EXPECT_EQ(a[kind].calls, b[kind].calls) << to_string(kind);
    EXPECT_EQ(a[kind].bytes, b[kind].bytes) << to_string(kind);
  }
}

TEST(DeviceTransport, StagedPathMatchesTheHostPathAndCountsTheSame) {
  REQUIRE_MPI();
  Communicator host = world_communicator();
  Communicator staged = world_communicator();
  auto transport = std::make_unique<StagedTransport>(Communicator(staged.mpi_comm(), "world"),
                                                     std::make_unique<HostCopier>());
  StagedTransport* staging = transport.get();
  staged.set_device_transport(std::move(transport));
  ASSERT_STREQ(staged.device_transport()->kind(), "staged");

  const auto expected = run_sequence(host);
  const auto actual = run_sequence(staged);
  EXPECT_EQ(actual, expected);
  expect_same_counts(staged.counts(), host.counts());
  if (host.size() > 1) {
    EXPECT_GT(host.counts().total_calls(), 10);  // the sequence was counted
  }
  // Every staging buffer came back; a step's collectives reuse them (at most 8 kept).
  EXPECT_GT(staging->pooled_bytes(), 0);
}

// bf16 activations and row messages (issue 60) on the staged path: the device's split format,
// summed to the same values and statistics as the host's interleaved one, counted the same.
TEST(DeviceTransport, StagedBf16AndRowMessagesMatchTheHostPath) {
  REQUIRE_MPI();
  Communicator host = world_communicator();
  Communicator staged = world_communicator();
  staged.set_device_transport(std::make_unique<StagedTransport>(
      Communicator(staged.mpi_comm(), "world"), std::make_unique<HostCopier>()));
  const int r = host.rank();
  const int64_t rows = 5, values = 3;
  auto value = [&](int64_t i) { return float_to_bf16(0.75f * static_cast<float>(i % 7) - r); };
  auto run = [&](Communicator& c) {
    std::vector<bf16_t> plain(11);
    for (int64_t i = 0; i < 11; ++i) plain[i] = value(i);
    c.all_reduce(plain.data(), 11);
    const RowMessage m = c.row_message(rows, values, 1);
    EXPECT_EQ(m.interleaved, c.device_transport() == nullptr);
    std::vector<char> message(m.bytes);
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t j = 0; j < values; ++j)
        m.values_in(message.data())[row * m.values_ld + j] = value(row * values + j);
      m.stats_in(message.data())[row * m.stats_ld] = 0.25f * static_cast<float>(row + 2 * r);
    }
    c.all_reduce_rows(message.data(), m);
    std::vector<float> out;
    for (bf16_t v : plain) out.push_back(bf16_to_float(v));
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t j = 0; j < values; ++j)
        out.push_back(bf16_to_float(m.values_in(message.data())[row * m.values_ld + j]));
      out.push_back(m.stats_in(message.data())[row * m.stats_ld]);
    }
    return out;
  };
  EXPECT_EQ(run(staged), run(host));
  expect_same_counts(staged.counts(), host.counts());
}

TEST(DeviceTransport, NcclStructureOverMpiMatchesTheHostPathAndCountsTheSame) {
  REQUIRE_MPI();
  Communicator host = world_communicator();
  Communicator device = world_communicator();
  auto transport = std::make_unique<MpiStandInTransport>(device);
  MpiStandInTransport* stand_in = transport.get();
  device.set_device_transport(std::move(transport));

  const auto expected = run_sequence(host);
  const auto actual = run_sequence(device);
  EXPECT_EQ(actual, expected);
  expect_same_counts(device.counts(), host.counts());
  // The uneven reduce-scatter ran as one Reduce per rank with a non-empty part, the even one as
  // one ReduceScatter.
  const int n = host.size();
  if (n > 1) {
    EXPECT_EQ(stand_in->reduce_calls, n == 2 ? 2 : n - 1);  // counts 3,1 | 3,1,0,2
    EXPECT_EQ(stand_in->reduce_scatter_calls, 1);
  }
}

// The bootstrap under mpirun: only rank 0 makes an id, every rank initialises with rank 0's, and
// nothing is counted (the id is control data).
TEST(DeviceTransport, BootstrapBroadcastsRankZerosId) {
  REQUIRE_MPI();
  Communicator world = world_communicator();
  int made = 0;
  UniqueId seen{};
  bootstrap_unique_id(
      world,
      [&] {
        ++made;
        UniqueId id{};
        for (int i = 0; i < kUniqueIdBytes; ++i) id[i] = static_cast<char>(i * 7 + 1);
        return id;
      },
      [&](const UniqueId& id) { seen = id; });
  EXPECT_EQ(made, world.rank() == 0 ? 1 : 0);
  for (int i = 0; i < kUniqueIdBytes; ++i) EXPECT_EQ(seen[i], static_cast<char>(i * 7 + 1)) << i;
  EXPECT_EQ(world.counts().total_calls(), 0);
}

}  // namespace
}  // namespace boostlm
