// ShardLoader over several shards. Shard k holds tokens k*1000 + 0..n-1, so a token names its
// shard and its position, and every expectation is exact.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "data/loader.h"
#include "data/shard.h"
#include "data/test_util.h"

namespace boostlm {
namespace {

using test::expect_error;
using test::TempDir;

std::string make_shard(const TempDir& dir, int index, uint32_t tokens) {
  std::vector<uint32_t> values(tokens);
  for (uint32_t i = 0; i < tokens; ++i) values[i] = static_cast<uint32_t>(index) * 1000 + i;
  char name[32];
  std::snprintf(name, sizeof name, "train_%06d.bin", index);
  write_shard(dir.file(name), values, 65536);
  return dir.file(name);
}

LoaderConfig shape(int64_t batch_size, int64_t seq_len, bool shuffle, int64_t rank = 0,
                   int64_t ranks = 1) {
  LoaderConfig c;
  c.batch_size = batch_size;
  c.seq_len = seq_len;
  c.shuffle = shuffle;
  c.seed = 7;
  c.dp_rank = rank;
  c.dp_size = ranks;
  return c;
}

// Shards of 25, 13, 6 (too short for a window) and 31 tokens; windows of 2*3+1 = 7 tokens every
// 6: floor(24/6) + floor(12/6) + 0 + floor(30/6) = 4 + 2 + 0 + 5 = 11 windows per epoch.
std::vector<std::string> four_shards(const TempDir& dir) {
  return {make_shard(dir, 0, 25), make_shard(dir, 1, 13), make_shard(dir, 2, 6),
          make_shard(dir, 3, 31)};
}

// Where a batch starts: (shard, token position).
std::pair<int, int> start_of(const Batch& batch) {
  return {batch.inputs[0] / 1000, batch.inputs[0] % 1000};
}

TEST(ShardLoader, EachEpochReadsEveryWindowOfEveryShardOnce) {
  TempDir dir;
  const auto shards = four_shards(dir);
  for (const bool shuffle : {false, true}) {
    ShardLoader loader(shards, shape(2, 3, shuffle));
    EXPECT_EQ(loader.windows_per_epoch(), 11);
    EXPECT_EQ(loader.num_tokens(), 25 + 13 + 6 + 31);
    std::vector<std::pair<int, int>> epochs[2];
    for (int epoch = 0; epoch < 2; ++epoch) {
      for (int i = 0; i < 11; ++i) {
        const Batch b = loader.next();
        // A window is 7 consecutive tokens of one shard; targets are inputs shifted by one.
        for (int j = 0; j < 6; ++j) {
          EXPECT_EQ(b.targets[j], b.inputs[j] + 1);
          if (j > 0) {
            EXPECT_EQ(b.inputs[j], b.inputs[j - 1] + 1);
          }
        }
        epochs[epoch].push_back(start_of(b));
      }
      const std::set<std::pair<int, int>> seen(epochs[epoch].begin(), epochs[epoch].end());
      const std::set<std::pair<int, int>> every = {{0, 0}, {0, 6}, {0, 12}, {0, 18}, {1, 0}, {1, 6},
                                                   {3, 0}, {3, 6}, {3, 12}, {3, 18}, {3, 24}};
      EXPECT_EQ(seen, every) << "shuffle " << shuffle;
    }
    if (!shuffle) {
      EXPECT_EQ(epochs[0], epochs[1]);
      EXPECT_EQ(epochs[0][4], std::make_pair(1, 0));  // in order: shard 0's four, then shard 1
    } else {
      EXPECT_NE(epochs[0], epochs[1]);  // another order each epoch
    }
  }
}

TEST(ShardLoader, DataParallelRanksReadTheSingleProcessStreamBetweenThem) {
  TempDir dir;
  const auto shards = four_shards(dir);
  ShardLoader single(shards, shape(2, 3, true));
  ShardLoader rank0(shards, shape(2, 3, true, 0, 2)), rank1(shards, shape(2, 3, true, 1, 2));
  for (int step = 0; step < 15; ++step) {  // across an epoch boundary (11 windows)
    EXPECT_EQ(rank0.next().inputs, single.next().inputs) << step;
    EXPECT_EQ(rank1.next().inputs, single.next().inputs) << step;
  }
}

TEST(ShardLoader, ResumesExactlyFromItsState) {
  TempDir dir;
  const auto shards = four_shards(dir);
  for (const bool shuffle : {false, true}) {
    ShardLoader uninterrupted(shards, shape(2, 3, shuffle));
    ShardLoader first(shards, shape(2, 3, shuffle));
    for (int i = 0; i < 9; ++i) uninterrupted.next(), first.next();
    // Through JSON text, as a checkpoint stores it; resumed on 2 DP ranks as well.
    const auto saved = nlohmann::json::parse(first.state().dump());
    ShardLoader resumed(shards, shape(2, 3, shuffle));
    resumed.load_state(saved);
    ShardLoader rank0(shards, shape(2, 3, shuffle, 0, 2)),
        rank1(shards, shape(2, 3, shuffle, 1, 2));
    rank0.load_state(saved);
    rank1.load_state(saved);
    for (int i = 0; i < 30; ++i) {
      const Batch expected = uninterrupted.next();
      EXPECT_EQ(resumed.next().inputs, expected.inputs) << i;
      EXPECT_EQ((i % 2 == 0 ? rank0 : rank1).next().inputs, expected.inputs) << i;
    }
  }
}

// Shards added after the checkpoint: the epoch under way finishes in its saved order, and the new
// shard is read from the next epoch on.
TEST(ShardLoader, ResumesExactlyAfterTheShardListGrows) {
  TempDir dir;
  auto shards = four_shards(dir);
  ShardLoader before(shards, shape(2, 3, true));
  for (int i = 0; i < 5; ++i) before.next();
  const nlohmann::json saved = before.state();
  shards.push_back(make_shard(dir, 4, 19));  // 3 more windows
  ShardLoader grown(shards, shape(2, 3, true));
  grown.load_state(saved);
  for (int i = 5; i < 11; ++i) EXPECT_EQ(grown.next().inputs, before.next().inputs) << i;
  std::set<std::pair<int, int>> next_epoch;
  for (int i = 0; i < 14; ++i) next_epoch.insert(start_of(grown.next()));
  EXPECT_EQ(next_epoch.size(), 14u);
  EXPECT_TRUE(next_epoch.contains({4, 12}));
}

TEST(ShardLoader, RefusesAStateItCannotContinue) {
  TempDir dir;
  const auto shards = four_shards(dir);
  ShardLoader loader(shards, shape(2, 3, true));
  loader.next();
  const nlohmann::json saved = loader.state();
  ShardLoader other_seq(shards, shape(2, 4, true));
  expect_error([&] { other_seq.load_state(saved); }, {"--seq-len 3", "--seq-len 4"});
  ShardLoader fewer({shards[0], shards[2], shards[3]}, shape(2, 3, true));
  expect_error([&] { fewer.load_state(saved); }, {"train_000001.bin", "no longer lists"});
  DataLoader single(std::vector<int32_t>(64, 1), shape(2, 3, false));
  expect_error([&] { loader.load_state(single.state()); }, {"one token file"});
  expect_error([&] { single.load_state(saved); }, {"list of shards"});
  expect_error([&] { ShardLoader({shards[2]}, shape(2, 3, false)); }, {"no shard", "B*T+1 = 7"});
}

TEST(ShardLoader, ChecksTokensAgainstTheVocabularyAsItReads) {
  TempDir dir;
  const auto shards = four_shards(dir);
  ShardLoader loader(shards, shape(2, 3, false), /*vocab_size=*/1000);
  for (int i = 0; i < 4; ++i) loader.next();  // shard 0: tokens below 1000
  expect_error([&] { loader.next(); }, {"train_000001.bin", "token 1000", "[0, 1000)"});
}

// The evaluation windows of several shards: each shard's full windows from its token 0, shard
// after shard, as ShardLoader's first epoch reads them without shuffling. four_shards: 4 + 2 + 0
// + 5 windows of 2*3+1 tokens.
TEST(EvalWindows, ReadsEachShardsWindowsInOrderAsOneSequence) {
  TempDir dir;
  const auto shards = four_shards(dir);
  EvalWindows windows(shards, 2, 3);
  ASSERT_EQ(windows.size(), 11);
  EXPECT_EQ(windows.num_tokens(), 25 + 13 + 6 + 31);
  EXPECT_EQ(windows.num_shards(), 4);
  const std::vector<std::pair<int, int>> starts = {{0, 0}, {0, 6}, {0, 12}, {0, 18}, {1, 0}, {1, 6},
                                                   {3, 0}, {3, 6}, {3, 12}, {3, 18}, {3, 24}};
  ShardLoader loader(shards, shape(2, 3, false));
  for (int64_t i = 0; i < windows.size(); ++i) {
    const Batch batch = windows.window(i);
    EXPECT_EQ(start_of(batch), starts[i]) << "window " << i;
    const Batch expected = loader.next();
    EXPECT_EQ(batch.inputs, expected.inputs) << "window " << i;
    EXPECT_EQ(batch.targets, expected.targets) << "window " << i;
    // No window crosses a shard: its last target is in the shard of its first input.
    EXPECT_EQ(batch.targets.back() / 1000, starts[i].first) << "window " << i;
    EXPECT_EQ(batch.targets.back() % 1000, starts[i].second + 6) << "window " << i;
  }
  // Reading a window again gives it again (evaluation reads the same windows every time).
  EXPECT_EQ(start_of(windows.window(4)), std::make_pair(1, 0));
}

TEST(EvalWindows, NamesTheShardsTheFirstWindowsComeFrom) {
  TempDir dir;
  const auto shards = four_shards(dir);
  const EvalWindows windows(shards, 2, 3);
  using Paths = std::vector<std::string>;
  EXPECT_EQ(windows.shards_holding(1), Paths({shards[0]}));
  EXPECT_EQ(windows.shards_holding(4), Paths({shards[0]}));
  EXPECT_EQ(windows.shards_holding(5), Paths({shards[0], shards[1]}));
  EXPECT_EQ(windows.shards_holding(6), Paths({shards[0], shards[1]}));
  // shards[2] holds no window, so it is not among them.
  EXPECT_EQ(windows.shards_holding(7), Paths({shards[0], shards[1], shards[3]}));
  EXPECT_EQ(windows.shards_holding(11), Paths({shards[0], shards[1], shards[3]}));
  // The windows of a shorter list are the first windows of the longer one.
  EvalWindows two({shards[0], shards[1]}, 2, 3);
  EXPECT_EQ(two.size(), 6);
  EXPECT_EQ(start_of(two.window(5)), std::make_pair(1, 6));
}

TEST(EvalWindows, ChecksTokensAgainstTheVocabularyAsItReads) {
  TempDir dir;
  const auto shards = four_shards(dir);
  EvalWindows windows(shards, 2, 3, /*vocab_size=*/1000);
  for (int64_t i = 0; i < 4; ++i) windows.window(i);  // shard 0: tokens below 1000
  expect_error([&] { windows.window(4); }, {"train_000001.bin", "token 1000", "[0, 1000)"});
}

// Only the headers are read up front; a shard is opened when one of its windows is read, and
// refused if it changed since its header was read.
TEST(EvalWindows, OpensAShardWhenOneOfItsWindowsIsRead) {
  TempDir dir;
  const auto shards = four_shards(dir);
  EvalWindows windows(shards, 2, 3);
  std::filesystem::remove(shards[3]);
  for (int64_t i = 0; i < 6; ++i) windows.window(i);  // shards 0 and 1 only
  expect_error([&] { windows.window(6); }, {"train_000003.bin"});
  EvalWindows again({shards[0], shards[1]}, 2, 3);
  make_shard(dir, 0, 19);  // rewritten shorter after its header was read
  expect_error([&] { again.window(0); }, {"train_000000.bin", "19 tokens", "held 25", "change"});
  expect_error([&] { EvalWindows({}, 2, 3); }, {"no shards"});
}

}  // namespace
}  // namespace boostlm
