// Loader windows land on exact token positions. The shard here holds tokens 0..N-1, so a token's
// value is its position and every expectation is a position.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "data/loader.h"
#include "data/shard.h"
#include "data/test_util.h"

namespace boostlm {
namespace {

using test::expect_error;

std::vector<int32_t> iota_tokens(int32_t n) {
  std::vector<int32_t> tokens(n);
  std::iota(tokens.begin(), tokens.end(), 0);
  return tokens;
}

std::vector<int32_t> positions(int64_t start, int64_t count, int64_t n) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < count; ++i) out.push_back(static_cast<int32_t>((start + i) % n));
  return out;
}

LoaderConfig config(int64_t batch_size, int64_t seq_len) {
  LoaderConfig c;
  c.batch_size = batch_size;
  c.seq_len = seq_len;
  return c;
}

// B=2, T=3: windows of 7 tokens starting every 6 tokens of a 20-token shard.
TEST(Loader, StepZeroReadsFirstWindowWithShiftedTargets) {
  DataLoader loader(iota_tokens(20), config(2, 3));
  const Batch batch = loader.next();
  EXPECT_EQ(batch.batch_size, 2);
  EXPECT_EQ(batch.seq_len, 3);
  EXPECT_EQ(batch.inputs, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(batch.targets, (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(loader.position(), 1);
}

TEST(Loader, StepKStartsAtKTimesBT) {
  DataLoader loader(iota_tokens(20), config(2, 3));
  const Batch batch = loader.batch_at(2);
  EXPECT_EQ(batch.inputs, positions(12, 6, 20));
  EXPECT_EQ(batch.targets, positions(13, 6, 20));
  EXPECT_EQ(loader.position(), 0);  // batch_at does not move the loader
}

TEST(Loader, WrapsPastTheEndToTokenZero) {
  DataLoader loader(iota_tokens(20), config(2, 3));
  const Batch batch = loader.batch_at(3);  // starts at 18
  EXPECT_EQ(batch.inputs, (std::vector<int32_t>{18, 19, 0, 1, 2, 3}));
  EXPECT_EQ(batch.targets, (std::vector<int32_t>{19, 0, 1, 2, 3, 4}));
  // The stream continues cyclically: step 4 starts at 24 mod 20 = 4.
  EXPECT_EQ(loader.batch_at(4).inputs, positions(4, 6, 20));
  // A window that ends exactly on the last token takes its final target from token 0.
  DataLoader exact(iota_tokens(12), config(2, 3));
  EXPECT_EQ(exact.batch_at(1).targets, (std::vector<int32_t>{7, 8, 9, 10, 11, 0}));
}

TEST(Loader, DataParallelRanksSplitTheGlobalBatch) {
  const int64_t dp_size = 3;
  DataLoader single(iota_tokens(50), config(2, 2));
  for (int64_t rank = 0; rank < dp_size; ++rank) {
    LoaderConfig c = config(2, 2);
    c.dp_rank = rank;
    c.dp_size = dp_size;
    DataLoader loader(iota_tokens(50), c);
    for (int64_t step = 0; step < 6; ++step) {
      const int64_t global_window = step * dp_size + rank;
      EXPECT_EQ(loader.window_start(step), global_window * 4 % 50);
      EXPECT_EQ(loader.next().inputs, single.batch_at(global_window).inputs)
          << "rank " << rank << " step " << step;
    }
  }
}

TEST(Loader, ShuffleVisitsEveryWindowOncePerEpochReproducibly) {
  LoaderConfig c = config(1, 10);
  c.shuffle = true;
  c.seed = 42;
  DataLoader a(iota_tokens(1000), c);
  DataLoader b(iota_tokens(1000), c);
  ASSERT_EQ(a.windows_per_epoch(), 100);
  std::vector<int64_t> epoch0, epoch1;
  for (int64_t step = 0; step < 200; ++step) {
    const Batch batch = a.next();
    ASSERT_EQ(batch.inputs, b.next().inputs) << "step " << step;
    (step < 100 ? epoch0 : epoch1).push_back(batch.inputs[0]);
    EXPECT_EQ(batch.targets[0], batch.inputs[0] + 1);
  }
  std::vector<int64_t> all_starts(100);
  for (int64_t i = 0; i < 100; ++i) all_starts[i] = 10 * i;
  for (const auto* epoch : {&epoch0, &epoch1}) {
    std::vector<int64_t> sorted = *epoch;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, all_starts);
  }
  EXPECT_NE(epoch0, epoch1);  // 1 in 100! to fail by chance
  EXPECT_NE(epoch0, std::vector<int64_t>(all_starts));

  c.seed = 43;
  DataLoader other(iota_tokens(1000), c);
  std::vector<int64_t> other_epoch0;
  for (int64_t step = 0; step < 100; ++step) other_epoch0.push_back(other.next().inputs[0]);
  EXPECT_NE(other_epoch0, epoch0);
}

TEST(Loader, ShuffledDataParallelRanksPartitionAnEpoch) {
  std::set<int64_t> starts;
  for (int64_t rank = 0; rank < 4; ++rank) {
    LoaderConfig c = config(2, 5);
    c.shuffle = true;
    c.seed = 7;
    c.dp_rank = rank;
    c.dp_size = 4;
    DataLoader loader(iota_tokens(400), c);  // 40 windows: 10 steps of 4 ranks
    for (int64_t step = 0; step < 10; ++step) starts.insert(loader.next().inputs[0]);
  }
  EXPECT_EQ(starts.size(), 40u);
}

TEST(Loader, SetPositionResumesBitExactly) {
  for (bool shuffle : {false, true}) {
    LoaderConfig c = config(3, 7);
    c.shuffle = shuffle;
    c.seed = 1234;
    DataLoader original(iota_tokens(500), c);
    for (int i = 0; i < 37; ++i) original.next();  // past the first epoch of 24 windows
    const nlohmann::json saved = original.state();
    DataLoader resumed(iota_tokens(500), c);
    resumed.load_state(nlohmann::json::parse(saved.dump()));
    DataLoader by_position(iota_tokens(500), c);
    by_position.set_position(original.position());
    for (int i = 0; i < 30; ++i) {
      const Batch expected = original.next();
      const Batch got = resumed.next();
      EXPECT_EQ(got.inputs, expected.inputs) << "shuffle=" << shuffle << " step " << i;
      EXPECT_EQ(got.targets, expected.targets);
      EXPECT_EQ(by_position.next().inputs, expected.inputs);
    }
  }
}

// A run saved at DP 2 and resumed at DP 1 (with twice the micro-batches) or DP 4 reads on from
// the same global window: the windows of every later step are those the DP 2 run would have read.
TEST(Loader, LoadStateReshardsAcrossDataParallelSizes) {
  for (bool shuffle : {false, true}) {
    auto make = [&](int64_t rank, int64_t size) {
      LoaderConfig c = config(2, 3);
      c.shuffle = shuffle;
      c.seed = 99;
      c.dp_rank = rank;
      c.dp_size = size;
      return DataLoader(iota_tokens(500), c);
    };
    DataLoader a = make(0, 2), b = make(1, 2);
    for (int i = 0; i < 12; ++i) a.next(), b.next();  // 24 global windows read
    const nlohmann::json saved = a.state();
    std::vector<std::vector<int32_t>> want;  // the next 8 global windows at DP 2
    for (int i = 0; i < 4; ++i) want.push_back(a.next().inputs), want.push_back(b.next().inputs);
    DataLoader one = make(0, 1);
    one.load_state(saved);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(one.next().inputs, want[i]) << "dp 1, window " << i;
    std::vector<DataLoader> four;
    for (int64_t r = 0; r < 4; ++r) four.push_back(make(r, 4));
    for (DataLoader& l : four) l.load_state(saved);
    for (int i = 0; i < 8; ++i)
      EXPECT_EQ(four[i % 4].next().inputs, want[i]) << "dp 4, window " << i;
  }
  // 3 windows read at DP 3 cannot be shared by 2 ranks.
  LoaderConfig c = config(2, 3);
  c.dp_size = 3;
  DataLoader three(iota_tokens(500), c, "train.bin");
  three.next();
  c.dp_size = 2;
  DataLoader two(iota_tokens(500), c, "train.bin");
  expect_error([&] { two.load_state(three.state()); }, {"train.bin", "--dp 3", "evenly"});
}

TEST(Loader, LoadStateRefusesADifferentConfiguration) {
  LoaderConfig c = config(2, 4);
  DataLoader loader(iota_tokens(100), c, "train.bin");
  nlohmann::json state = loader.state();
  state["seq_len"] = 8;
  expect_error([&] { loader.load_state(state); }, {"train.bin", "--seq-len 8", "--seq-len 4"});
  state = loader.state();
  state.erase("step");
  expect_error([&] { loader.load_state(state); }, {"train.bin", "step"});
}

TEST(Loader, RefusesShardShorterThanOneWindow) {
  expect_error([] { DataLoader(iota_tokens(12), config(3, 4), "tiny.bin"); },
               {"tiny.bin", "12 tokens", "B*T+1 = 13"});
  DataLoader(iota_tokens(13), config(3, 4));  // exactly one window fits
  expect_error([] { DataLoader::window(iota_tokens(4), 0, 2, 2, "val.bin"); },
               {"val.bin", "4 tokens"});
}

TEST(Loader, RefusesBadConfig) {
  LoaderConfig c = config(2, 2);
  c.dp_rank = 2;
  c.dp_size = 2;
  expect_error([&] { DataLoader(iota_tokens(100), c, "x.bin"); }, {"x.bin", "dp_rank=2"});
  expect_error([] { DataLoader(iota_tokens(100), config(0, 2)); }, {"batch_size=0"});
}

TEST(Loader, ReadsItsShardFromDisk) {
  test::TempDir dir;
  const std::string path = dir.file("train.bin");
  std::vector<uint32_t> tokens(30);
  std::iota(tokens.begin(), tokens.end(), 100u);
  write_shard(path, tokens, 200);
  DataLoader loader = DataLoader::from_shard(path, config(1, 4));
  EXPECT_EQ(loader.batch_at(1).inputs, (std::vector<int32_t>{104, 105, 106, 107}));
  expect_error([&] { DataLoader::from_shard(path, config(5, 6)); }, {path, "30 tokens"});
}

TEST(Loader, EvaluationWindowsIgnoreTheTrainingPosition) {
  const std::vector<int32_t> tokens = iota_tokens(25);
  LoaderConfig c = config(2, 3);
  DataLoader loader(tokens, c);
  for (int i = 0; i < 5; ++i) loader.next();
  for (int64_t index = 0; index < 6; ++index) {
    EXPECT_EQ(DataLoader::window(tokens, index, 2, 3).inputs, loader.batch_at(index).inputs);
  }
  EXPECT_EQ(DataLoader::window(tokens, 1, 2, 3).targets, positions(7, 6, 25));
  EXPECT_EQ(DataLoader::full_windows(25, 2, 3), 4);  // 4 windows of 7 tokens fit in 25
  EXPECT_EQ(DataLoader::full_windows(24, 2, 3), 3);  // the 4th would need token 24
}

}  // namespace
}  // namespace boostlm
