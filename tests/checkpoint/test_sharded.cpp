// Sharded checkpoints across processes (checkpoint/saver.h, reader.h), under mpirun with 1, 2 and
// 4 ranks: a model saved by every grid of the job's size (TP × PP × DP, with and without ZeRO-1)
// is read back by every grid and by one process (cola and lax under btp and naive-tp, dense under
// dense-tp); the same grid reads its weights and moments bit
// for bit, another grid gets the elements of its own shards; no rank writes more than its shard;
// a rank whose write fails leaves the earlier checkpoint whole and no temporary directory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "checkpoint/saver.h"
#include "comm/grid.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "engine/data_parallel.h"
#include "engine/model.h"
#include "test_util.h"
#include "train/checkpoint.h"

namespace boostlm {
namespace {

namespace fs = std::filesystem;

struct Layouted {
  Arch arch;
  LayoutKind layout;
};

// Every grid of `world` ranks with TP ≤ 2 and PP ≤ 2.
std::vector<GridShape> grids_of(int world) {
  std::vector<GridShape> out;
  for (int tp : {1, 2})
    for (int pp : {1, 2})
      if (world % (tp * pp) == 0) out.push_back({tp, pp, world / (tp * pp)});
  return out;
}

std::string name_of(const GridShape& g, int zero) {
  return "tp" + std::to_string(g.tp) + "pp" + std::to_string(g.pp) + "dp" + std::to_string(g.dp) +
         (zero ? "z" : "");
}

// Full moments with values of their own (element i of tensor k: a smooth function of both).
FlatBuffer full_moment(const ParamTable& full, float scale) {
  FlatBuffer m(full.total_elements());
  int k = 0;
  for (const ParamInfo& p : full.entries()) {
    ++k;
    for (int64_t i = 0; i < p.numel; ++i)
      m.view(p)[i] = scale * std::sin(0.37f * static_cast<float>(i) + static_cast<float>(k));
  }
  return m;
}

// This rank's flat range [begin, end) of its table's buffer, from a full buffer.
FlatBuffer local_range(const Model& model, const FlatBuffer& full, int64_t begin, int64_t end) {
  FlatBuffer local(model.params().total_elements());
  model.slice_full(full, local);
  FlatBuffer range(end - begin);
  std::copy(local.data() + begin, local.data() + end, range.data());
  return range;
}

class ShardedCheckpoint : public ::testing::TestWithParam<Layouted> {};

TEST_P(ShardedCheckpoint, EveryGridReadsWhatEveryGridWrote) {
  const int world = mpi_world_size();
  ModelConfig config = small_model(GetParam().arch);
  config.n_layers = 3;
  config.validate();
  const LayoutKind layout = GetParam().layout;
  Model reference(config, DType::f32);
  reference.init_weights(7);
  const FlatBuffer full_m = full_moment(reference.params(), 1e-3f);
  const FlatBuffer full_v = full_moment(reference.params(), 2e-6f);
  const fs::path base = fs::temp_directory_path() /
                        ("boostlm_sharded_" + to_string(config.arch) + "_" + to_string(layout));
  ProcessGrid job(GridShape{1, 1, world});
  Communicator& whole = job.world();
  if (whole.rank() == 0) {
    fs::remove_all(base);
    fs::create_directories(base);
  }
  whole.barrier();

  for (const GridShape& saved : grids_of(world))
    for (int zero : {0, 1}) {
      if (zero && saved.dp == 1) continue;
      const std::string dir = (base / name_of(saved, zero)).string();
      {
        ProcessGrid grid(saved);
        Model model(config, DType::f32, layout, &grid.tp(), {}, &grid.pp());
        model.slice_full(reference.weights(), model.weights());
        ZeroStage1 range(model.params().total_elements(), grid.dp());
        const int64_t begin = zero ? range.begin() : 0;
        const int64_t end = zero ? range.end() : model.params().total_elements();
        const FlatBuffer m = local_range(model, full_m, begin, end);
        const FlatBuffer v = local_range(model, full_v, begin, end);
        RankState state;
        state.table = &model.params();
        state.weights = &model.weights();
        state.exp_avg = &m;
        state.exp_avg_sq = &v;
        state.moments_begin = begin;
        state.moments_end = end;
        state.zero1 = zero == 1;
        state.full_table = &model.full_params();
        TrainingState trainer;
        trainer.step = 5;
        trainer.loader = nlohmann::json::object();
        CheckpointSaver saver(grid.world(),
                              {grid.tp_rank(), saved.tp, grid.pp_rank(), saved.pp,
                               grid.dp_rank(), saved.dp},
                              /*async=*/true);
        ASSERT_FALSE(saver.begin(dir, state, checkpoint_root_files(config, {}, "", &trainer, 5)));
        const auto done = saver.finish();
        ASSERT_TRUE(done);
        // Nothing written twice: the job's files hold each tensor and moment once (+ headers).
        const double elements = static_cast<double>(reference.params().parameter_count());
        // Headers: a few hundred bytes a tensor (lax has many small ones).
        const double headers = 16384.0 + 512.0 * static_cast<double>(model.params().entries().size());
        EXPECT_LE(static_cast<double>(done->bytes), 12 * elements + headers * world);
        EXPECT_GE(static_cast<double>(done->bytes), 12 * elements);
        // No rank writes more than it holds (+ its headers).
        const std::string mine =
            world == 1 ? "" : "-r" + std::string(5 - std::to_string(grid.world_rank()).size(), '0') +
                                  std::to_string(grid.world_rank());
        double written = 0;
        for (const char* stem : {"model", "optimizer"})
          if (fs::exists(dir + "/" + stem + mine + ".safetensors"))
            written += static_cast<double>(fs::file_size(dir + "/" + stem + mine + ".safetensors"));
        EXPECT_LE(written, 4.0 * (model.params().total_elements() + 2 * (end - begin)) + headers)
            << name_of(saved, zero);
      }
      // Read back by every grid, each of its ranks its own pieces.
      for (const GridShape& loaded : grids_of(world))
        for (int zero_load : {0, 1}) {
          if (zero_load && loaded.dp == 1) continue;
          const std::string where = name_of(saved, zero) + " -> " + name_of(loaded, zero_load);
          ProcessGrid grid(loaded);
          Model model(config, DType::f32, layout, &grid.tp(), {}, &grid.pp());
          load_checkpoint_weights(dir, model);
          FlatBuffer expected(model.params().total_elements());
          model.slice_full(reference.weights(), expected);
          ASSERT_EQ(0, std::memcmp(expected.data(), model.weights().data(),
                                   expected.size() * sizeof(float)))
              << where;
          ZeroStage1 range(model.params().total_elements(), grid.dp());
          const int64_t begin = zero_load ? range.begin() : 0;
          const int64_t end = zero_load ? range.end() : model.params().total_elements();
          FlatBuffer m(end - begin), v(end - begin);
          TrainingState trainer;
          EXPECT_EQ(load_training_state(dir, model.params(), m, v, trainer, begin, end), 5);
          EXPECT_EQ(trainer.step, 5);
          const FlatBuffer em = local_range(model, full_m, begin, end);
          const FlatBuffer ev = local_range(model, full_v, begin, end);
          ASSERT_EQ(0, std::memcmp(em.data(), m.data(), em.size() * sizeof(float))) << where;
          ASSERT_EQ(0, std::memcmp(ev.data(), v.data(), ev.size() * sizeof(float))) << where;
        }
      // And by one process (eval, generate, convert), whole.
      Model one(config, DType::f32);
      load_checkpoint_weights(dir, one);
      ASSERT_EQ(0, std::memcmp(reference.weights().data(), one.weights().data(),
                               one.weights().size() * sizeof(float)));
    }
  whole.barrier();
}

INSTANTIATE_TEST_SUITE_P(Layouts, ShardedCheckpoint,
                         ::testing::Values(Layouted{Arch::cola, LayoutKind::btp},
                                           Layouted{Arch::cola, LayoutKind::naive_tp},
                                           Layouted{Arch::dense, LayoutKind::dense_tp},
                                           Layouted{Arch::lax, LayoutKind::btp},
                                           Layouted{Arch::lax, LayoutKind::naive_tp}),
                         [](const auto& info) {
                           std::string n = to_string(info.param.arch) + "_" +
                                           to_string(info.param.layout);
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// A full disk on one rank (BOOSTLM_CHECKPOINT_FAULT=full@R): every rank learns that the save
// failed, and the earlier checkpoint is intact, loadable, and alone in its directory.
TEST(ShardedCheckpointFaults, AFailedWriteOnOneRankLeavesTheEarlierCheckpoint) {
  const int world = mpi_world_size();
  const ModelConfig config = small_model(Arch::cola);
  ProcessGrid grid({world >= 2 ? 2 : 1, 1, world >= 2 ? world / 2 : 1});
  Model model(config, DType::f32, LayoutKind::btp, &grid.tp());
  model.init_weights(3);
  FlatBuffer m(model.params().total_elements()), v(model.params().total_elements());
  const fs::path base = fs::temp_directory_path() / "boostlm_sharded_fault";
  if (grid.world_rank() == 0) {
    fs::remove_all(base);
    fs::create_directories(base);
  }
  grid.world().barrier();
  RankState state;
  state.table = &model.params();
  state.weights = &model.weights();
  state.exp_avg = &m;
  state.exp_avg_sq = &v;
  state.full_table = &model.full_params();
  TrainingState trainer;
  trainer.loader = nlohmann::json::object();
  const ShardRanks ranks{grid.tp_rank(), grid.shape().tp, 0, 1, grid.dp_rank(), grid.shape().dp};
  CheckpointSaver saver(grid.world(), ranks, /*async=*/true);
  saver.begin((base / "step_000001").string(), state,
              checkpoint_root_files(config, {}, "", &trainer, 1));
  ASSERT_TRUE(saver.finish());
  const std::string fault = "full@" + std::to_string(world - 1);
  ::setenv("BOOSTLM_CHECKPOINT_FAULT", fault.c_str(), 1);
  bool failed = false;
  try {
    saver.begin((base / "step_000002").string(), state,
                checkpoint_root_files(config, {}, "", &trainer, 2));
    saver.finish();
  } catch (const Error& e) {
    failed = true;
    EXPECT_NE(std::string(e.what()).find("No space left on device"), std::string::npos)
        << e.what();
  }
  ::unsetenv("BOOSTLM_CHECKPOINT_FAULT");
  EXPECT_TRUE(failed) << "every rank learns of the failure";
  grid.world().barrier();
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(base)) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"step_000001"});
  verify_checkpoint((base / "step_000001").string());
  Model back(config, DType::f32, LayoutKind::btp, &grid.tp());
  load_checkpoint_weights((base / "step_000001").string(), back);
  EXPECT_EQ(0, std::memcmp(back.weights().data(), model.weights().data(),
                           model.weights().size() * sizeof(float)));
  grid.world().barrier();
}

}  // namespace
}  // namespace boostlm

namespace boostlm {
namespace {

namespace fs = std::filesystem;

// Each rank's own directory where `shared` is false: what a run whose --out lies on each node's
// own disk amounts to (the same path, other contents).
fs::path directory_of(const std::string& name, int rank, bool shared) {
  return fs::temp_directory_path() / (shared ? name : name + "_rank" + std::to_string(rank));
}

// A run directory that every rank sees passes; one that a rank does not share with rank 0 is
// refused on every rank, naming the rank and its host, and no probe is left behind.
TEST(ShardedCheckpointFaults, ARunDirectoryThatIsNotSharedIsRefusedAtStart) {
  const int world = mpi_world_size();
  if (world == 1) GTEST_SKIP() << "one process: nothing to share";
  ProcessGrid grid({1, 1, world});
  for (const bool shared : {true, false}) {
    const fs::path dir =
        directory_of("boostlm_shared_probe", shared ? 0 : grid.world_rank() / (world - 1), shared);
    if (grid.world_rank() == 0 || (!shared && grid.world_rank() == world - 1)) {
      fs::remove_all(dir);
      fs::create_directories(dir);
    }
    grid.world().barrier();
    std::string refused;
    try {
      check_shared_directory(grid.world(), dir.string());
    } catch (const Error& e) {
      refused = e.what();
    }
    if (shared) {
      EXPECT_EQ(refused, "");
    } else {
      EXPECT_NE(refused.find("is not one directory that every rank sees: rank " +
                             std::to_string(world - 1) + " (host "),
                std::string::npos)
          << refused;
      EXPECT_NE(refused.find("a file system that every rank sees"), std::string::npos) << refused;
    }
    grid.world().barrier();
    EXPECT_TRUE(fs::is_empty(dir)) << "a probe was left in " << dir;
    grid.world().barrier();
  }
}

// A rank whose files go where rank 0 does not see them (its own disk) makes the save fail on
// every rank before anything is committed: rank 0 looks for every reported file in the temporary
// directory, at its size. The earlier checkpoint stays, and no rank keeps its temporary files.
TEST(ShardedCheckpointFaults, FilesThatRankZeroDoesNotSeeAreNotCommitted) {
  const int world = mpi_world_size();
  if (world == 1) GTEST_SKIP() << "one process: nothing to share";
  const ModelConfig config = small_model(Arch::cola);
  ProcessGrid grid({world >= 2 ? 2 : 1, 1, world / 2});
  Model model(config, DType::f32, LayoutKind::btp, &grid.tp());
  model.init_weights(3);
  RankState state;
  state.table = &model.params();
  state.weights = &model.weights();
  state.full_table = &model.full_params();
  const ShardRanks ranks{grid.tp_rank(), grid.shape().tp, 0, 1, grid.dp_rank(), grid.shape().dp};
  const bool last = grid.world_rank() == world - 1;
  const fs::path shared = directory_of("boostlm_unseen", 0, true);
  const fs::path own = directory_of("boostlm_unseen", 1, false);
  if (grid.world_rank() == 0) {
    fs::remove_all(shared);
    fs::create_directories(shared);
  }
  if (last) fs::remove_all(own);
  grid.world().barrier();
  CheckpointSaver saver(grid.world(), ranks, /*async=*/true);
  saver.begin((shared / "step_000001").string(), state,
              checkpoint_root_files(config, {}, "", nullptr, 0));
  ASSERT_TRUE(saver.finish());
  // The last rank's --out is a directory of its own from now on.
  const fs::path out = last ? own : shared;
  std::string refused;
  try {
    saver.begin((out / "step_000002").string(), state,
                checkpoint_root_files(config, {}, "", nullptr, 0));
    saver.finish();
  } catch (const Error& e) {
    refused = e.what();
  }
  EXPECT_NE(refused.find("rank " + std::to_string(world - 1) + "'s model-r"), std::string::npos)
      << refused;
  EXPECT_NE(refused.find("missing"), std::string::npos) << refused;
  EXPECT_NE(refused.find("a file system that every rank sees"), std::string::npos) << refused;
  grid.world().barrier();
  if (grid.world_rank() == 0) {
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(shared))
      left.push_back(e.path().filename().string());
    EXPECT_EQ(left, std::vector<std::string>{"step_000001"});
    verify_checkpoint((shared / "step_000001").string());
  }
  if (last) {
    EXPECT_TRUE(!fs::exists(own) || fs::is_empty(own)) << "temporary files left in " << own;
  }
  grid.world().barrier();
}

}  // namespace
}  // namespace boostlm
