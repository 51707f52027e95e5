// Checkpoints: bit-identical round trips, atomic writes, and clear errors for every way a
// checkpoint can be wrong.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "comm/watchdog.h"
#include "core/error.h"
#include "core/file_io.h"
#include "formats/hf_import.h"
#include "formats/safetensors.h"
#include "train/checkpoint.h"
#include "train/run_dir.h"
#include "train_fixture.h"

namespace boostlm {
namespace {

namespace fs = std::filesystem;
using test_support::fresh_dir;
using test_support::tiny_config;

void expect_error(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

// A model and optimizer with non-trivial moments, saved as a resumable checkpoint.
struct Saved {
  Model model{tiny_config(), DType::f32};
  AdamW optimizer{model.params(), OptimizerConfig{}};
  TrainingState state;
  std::string dir;
  explicit Saved(const std::string& name) {
    model.init_weights(7);
    Rng rng(3);
    for (int64_t i = 0; i < model.grads().size(); ++i) model.grads().data()[i] = rng.normal();
    optimizer.step(model.weights(), model.grads(), 1e-3f);
    state.step = 1;
    state.tokens_seen = 128;
    state.loader = {{"step", 1}};
    dir = (fresh_dir(name) / "ckpt").string();
    save_checkpoint(dir, checkpoint_of(model, &optimizer, &state));
  }
};

bool bit_equal(const FlatBuffer& a, const FlatBuffer& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Checkpoint, RoundTripIsBitIdentical) {
  Saved saved("roundtrip");
  verify_checkpoint(saved.dir);
  const ModelConfig config = read_checkpoint_config(saved.dir);
  EXPECT_EQ(config.to_json(), saved.model.config().to_json());
  Model model(config, DType::f32);
  AdamW optimizer(model.params(), OptimizerConfig{});
  TrainingState state;
  load_checkpoint_weights(saved.dir, model);
  load_training_state(saved.dir, optimizer, state);
  EXPECT_TRUE(bit_equal(model.weights(), saved.model.weights()));
  EXPECT_TRUE(bit_equal(optimizer.first_moment(), saved.optimizer.first_moment()));
  EXPECT_TRUE(bit_equal(optimizer.second_moment(), saved.optimizer.second_moment()));
  EXPECT_EQ(optimizer.steps_taken(), 1);
  EXPECT_EQ(state.tokens_seen, 128);
  EXPECT_EQ(state.loader, saved.state.loader);
}

// A checkpoint written before sharding (issue 46): the same two files of whole tensors, no
// index.json, checksums of what it has. It loads, and resumes, as it did.
TEST(Checkpoint, ACheckpointFromBeforeShardingStillLoads) {
  Saved saved("before_sharding");
  fs::remove(saved.dir + "/index.json");
  nlohmann::json sums = nlohmann::json::parse(read_text_file(saved.dir + "/checksums.json"));
  ASSERT_TRUE(sums.contains("index.json"));
  sums.erase("index.json");
  write_file_atomically(saved.dir + "/checksums.json", sums.dump(2) + "\n");
  verify_checkpoint(saved.dir);
  Model model(saved.model.config(), DType::f32);
  AdamW optimizer(model.params(), OptimizerConfig{});
  TrainingState state;
  EXPECT_TRUE(has_training_state(saved.dir));
  load_checkpoint_weights(saved.dir, model);
  load_training_state(saved.dir, optimizer, state);
  EXPECT_TRUE(bit_equal(model.weights(), saved.model.weights()));
  EXPECT_TRUE(bit_equal(optimizer.first_moment(), saved.optimizer.first_moment()));
  EXPECT_TRUE(bit_equal(optimizer.second_moment(), saved.optimizer.second_moment()));
}

TEST(Checkpoint, SafetensorsHoldsTheSpecNamesAndShapesAndAnHfConfig) {
  Saved saved("names");
  SafetensorsReader reader(saved.dir + "/model.safetensors");
  EXPECT_EQ(reader.entries().at("model.layers.1.mlp.down_proj.cola_a").shape,
            (std::vector<int64_t>{48, 8}));
  EXPECT_EQ(reader.entries().at("model.layers.0.self_attn.k_proj.cola_b").shape,
            (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(reader.entries().at("lm_head.weight").dtype, "F32");
  EXPECT_EQ(reader.entries().size(), saved.model.params().entries().size());
  const auto hf = nlohmann::json::parse(read_text_file(saved.dir + "/config.json"));
  EXPECT_EQ(hf["model_type"], "cola");
  EXPECT_EQ(hf["hidden_size"], 32);
  EXPECT_EQ(hf["num_key_value_heads"], 2);
  EXPECT_EQ(hf["attn_rank"], 8);
}

TEST(Checkpoint, DetectsCorruptionByChecksum) {
  Saved saved("corrupt");
  {
    std::fstream f(saved.dir + "/model.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x7f');
  }
  expect_error([&] { verify_checkpoint(saved.dir); }, "checksum mismatch");
}

TEST(Checkpoint, RefusesAnIncompleteDirectory) {
  Saved saved("incomplete");
  fs::remove(saved.dir + "/checksums.json");
  expect_error([&] { verify_checkpoint(saved.dir); }, "incomplete");
  Saved other("incomplete2");
  fs::remove(other.dir + "/optimizer.safetensors");
  expect_error([&] { verify_checkpoint(other.dir); }, "missing optimizer.safetensors");
}

TEST(Checkpoint, RefusesMissingOrWronglyShapedTensors) {
  Saved saved("tensors");
  Model model(saved.model.config(), DType::f32);
  const std::string path = saved.dir + "/model.safetensors";
  // Rewrite the file without one tensor, then with one tensor of the wrong shape, as in a
  // checkpoint from before sharding (no index.json) whose checksums are not checked.
  fs::remove(saved.dir + "/index.json");
  fs::remove(saved.dir + "/checksums.json");
  std::vector<TensorToWrite> tensors;
  for (const auto& p : saved.model.params().entries())
    if (p.name != "model.norm.weight")
      tensors.push_back({p.name, p.shape, saved.model.weights().view(p)});
  write_safetensors(path, tensors);
  expect_error([&] { load_checkpoint_weights(saved.dir, model); },
               "missing tensor 'model.norm.weight'");
  tensors.push_back({"model.norm.weight", {16}, saved.model.weights().data()});
  write_safetensors(path, tensors);
  expect_error([&] { load_checkpoint_weights(saved.dir, model); },
               "'model.norm.weight' has shape [16], expected [32]");
}

TEST(Checkpoint, RefusesATruncatedSafetensorsFile) {
  Saved saved("truncated");
  const std::string path = saved.dir + "/model.safetensors";
  fs::resize_file(path, fs::file_size(path) - 100);
  expect_error([&] { SafetensorsReader reader(path); }, "outside the file");
}

TEST(Checkpoint, NonFiniteWeightsAreReportedAtLoad) {
  Saved saved("nonfinite");
  const ParamInfo& p = *saved.model.params().find("model.norm.weight");
  float* w = saved.model.weights().view(p);
  w[0] = std::numeric_limits<float>::quiet_NaN();
  w[3] = std::numeric_limits<float>::infinity();
  w[5] = -std::numeric_limits<float>::infinity();
  save_checkpoint(saved.dir, checkpoint_of(saved.model, &saved.optimizer, &saved.state));
  verify_checkpoint(saved.dir);  // the bytes are intact; the values are not
  Model model(saved.model.config(), DType::f32);
  expect_error([&] { load_checkpoint_weights(saved.dir, model); },
               "tensor 'model.norm.weight' holds 3 non-finite values");
}

TEST(Checkpoint, ConfigThatDoesNotMatchTheWeightsIsRefused) {
  Saved saved("mismatch");
  ModelConfig other = saved.model.config();
  other.d_ff = 40;
  Model model(other, DType::f32);
  expect_error([&] { load_checkpoint_weights(saved.dir, model); }, "has shape");
  ModelConfig dense = saved.model.config();
  dense.arch = Arch::dense;
  Model dense_model(dense, DType::f32);
  expect_error([&] { load_checkpoint_weights(saved.dir, dense_model); }, "missing tensor");
}

TEST(Checkpoint, WeightsOnlyCheckpointCannotBeResumed) {
  Model model(tiny_config(), DType::f32);
  model.init_weights(1);
  const std::string dir = (fresh_dir("weights_only") / "ckpt").string();
  save_checkpoint(dir, checkpoint_of(model));
  verify_checkpoint(dir);
  AdamW optimizer(model.params(), OptimizerConfig{});
  TrainingState state;
  expect_error([&] { load_training_state(dir, optimizer, state); }, "cannot be resumed");
}

TEST(AtomicWrite, UncommittedFileLeavesNoTrace) {
  const auto dir = fresh_dir("atomic");
  const std::string path = (dir / "file.bin").string();
  {
    AtomicFile file(path);
    file.write("partial");
  }  // destroyed without commit(), as when an exception unwinds mid-write
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_empty(dir));
  write_file_atomically(path, "old");
  {
    AtomicFile file(path);
    file.write("new but unfinished");
  }
  EXPECT_EQ(read_text_file(path), "old");  // the previous version survives
}

TEST(AtomicWrite, ResavingACheckpointReplacesItWhole) {
  Saved saved("resave");
  saved.state.step = 2;
  save_checkpoint(saved.dir, checkpoint_of(saved.model, &saved.optimizer, &saved.state));
  verify_checkpoint(saved.dir);
  const auto state = nlohmann::json::parse(read_text_file(saved.dir + "/trainer_state.json"));
  EXPECT_EQ(state["step"], 2);
  // No temporary or old directories are left next to it.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(fs::path(saved.dir).parent_path())) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);
}

// A save whose disk never finishes it (BOOSTLM_CHECKPOINT_FAULT=slow@0:60: the writer stalls at
// its model file) ends the process past the saver's bound as the communication watchdog ends a
// job (its exit code), naming the checkpoint, the rank and the file; nothing of it is committed.
// Asynchronous or not: a synchronous save is bounded the same way.
TEST(CheckpointSaver, ASaveStuckOnItsDiskEndsTheJobNamingRankAndFile) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Model model(tiny_config(), DType::f32);
  model.init_weights(1);
  RankState state;
  state.table = &model.params();
  state.full_table = &model.params();
  state.weights = &model.weights();
  for (const bool async : {true, false}) {
    const fs::path base = fresh_dir(async ? "stuck_async" : "stuck_sync");
    const std::string dir = (base / "step_000001").string();
    EXPECT_EXIT(
        {
          ::setenv("BOOSTLM_CHECKPOINT_FAULT", "slow@0:60", 1);
          Communicator self;
          CheckpointSaver saver(self, ShardRanks{}, async, /*timeout_s=*/0.5);
          saver.begin(dir, state, checkpoint_root_files(model.config(), {}, "", nullptr, 0));
          saver.finish();
        },
        ::testing::ExitedWithCode(kWatchdogExitCode),
        "checkpoint .*step_000001: 1 rank has not finished writing within 0.5 s of the save's "
        "start \\(rank 0 at .*model.safetensors\\).*--save-timeout")
        << (async ? "async" : "sync");
    EXPECT_FALSE(fs::exists(dir));
  }
  // A save within the bound commits as before.
  const fs::path base = fresh_dir("stuck_not");
  ::setenv("BOOSTLM_CHECKPOINT_FAULT", "slow@0:0.2", 1);
  Communicator self;
  CheckpointSaver saver(self, ShardRanks{}, /*async=*/true, /*timeout_s=*/30);
  saver.begin((base / "step_000001").string(), state,
              checkpoint_root_files(model.config(), {}, "", nullptr, 0));
  EXPECT_TRUE(saver.pending());
  EXPECT_GE(saver.pending_age_s(), 0.0);
  EXPECT_TRUE(saver.finish());
  ::unsetenv("BOOSTLM_CHECKPOINT_FAULT");
  EXPECT_FALSE(saver.pending());
  verify_checkpoint((base / "step_000001").string());
}

// A file that checksums.json does not list (put there after the commit) is refused by
// verification and by the reader, not read unchecked.
TEST(Checkpoint, RefusesAFileThatChecksumsJsonDoesNotList) {
  Saved saved("unlisted");
  nlohmann::json sums = nlohmann::json::parse(read_text_file(saved.dir + "/checksums.json"));
  ASSERT_TRUE(sums.contains("model.safetensors"));
  sums.erase("model.safetensors");
  write_file_atomically(saved.dir + "/checksums.json", sums.dump(2) + "\n");
  expect_error([&] { verify_checkpoint(saved.dir); },
               "model.safetensors, which checksums.json does not list");
  Model model(saved.model.config(), DType::f32);
  expect_error([&] { load_checkpoint_weights(saved.dir, model); },
               "model.safetensors is not listed in checksums.json");
}

// Rank 0's commit, one step at a time (BOOSTLM_CHECKPOINT_FAULT=KIND@0, in one process): a run
// directory's checkpoints/ with `latest`, as the trainer saves them.
struct CommitRun {
  Model model{tiny_config(), DType::f32};
  fs::path run, checkpoints;
  explicit CommitRun(const std::string& name)
      : run(fresh_dir(name)), checkpoints(run / "checkpoints") {
    model.init_weights(5);
    fs::create_directories(checkpoints);
  }
  std::string dir(int step) const {
    char name[32];
    std::snprintf(name, sizeof name, "step_%06d", step);
    return (checkpoints / name).string();
  }
  // Saves step `step`, with `fault` ("" for none) in the commit.
  void save(int step, const std::string& fault = "") {
    RankState state;
    state.table = &model.params();
    state.full_table = &model.params();
    state.weights = &model.weights();
    RootFiles files = checkpoint_root_files(model.config(), {}, "", nullptr, 0);
    files.latest = (checkpoints / "latest").string();
    if (!fault.empty()) ::setenv("BOOSTLM_CHECKPOINT_FAULT", (fault + "@0").c_str(), 1);
    Communicator self;
    CheckpointSaver saver(self, ShardRanks{}, /*async=*/false);
    try {
      saver.begin(dir(step), state, std::move(files));
    } catch (...) {
      ::unsetenv("BOOSTLM_CHECKPOINT_FAULT");
      throw;
    }
    ::unsetenv("BOOSTLM_CHECKPOINT_FAULT");
  }
  std::string latest() const { return latest_checkpoint_name(checkpoints); }
  // Entries of checkpoints/ other than step directories and `latest` (temporaries, moved-aside).
  std::vector<std::string> strays() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(checkpoints)) {
      const std::string name = e.path().filename().string();
      if (name != "latest" && !name.starts_with("step_")) out.push_back(name);
    }
    return out;
  }
};

// Every step of the commit that can fail leaves the newest complete checkpoint in place and
// found, and nothing that was committed deleted: a failed rename puts back the checkpoint it was
// to replace; a failed directory fsync after the rename is a warning, not a lost save; a
// `latest` that cannot be written says the checkpoint is committed, and the next start finds it.
TEST(CheckpointCommit, EveryFaultLeavesTheNewestCompleteCheckpointFound) {
  CommitRun run("commit_faults");
  run.save(1);
  EXPECT_EQ(run.latest(), "step_000001");
  // A re-save of step 1 whose rename into place fails: step 1 as it was, nothing stray.
  expect_error([&] { run.save(1, "rename"); }, "Input/output error");
  verify_checkpoint(run.dir(1));
  EXPECT_EQ(run.strays(), std::vector<std::string>{});
  EXPECT_EQ(run.latest(), "step_000001");
  // A new step whose rename fails: nothing of it, nothing stray.
  expect_error([&] { run.save(2, "rename"); }, "Input/output error");
  EXPECT_FALSE(fs::exists(run.dir(2)));
  EXPECT_EQ(run.strays(), std::vector<std::string>{});
  // The directory fsync after the rename fails: committed all the same, and named by `latest`.
  EXPECT_NO_THROW(run.save(2, "fsync"));
  verify_checkpoint(run.dir(2));
  EXPECT_EQ(run.latest(), "step_000002");
  // `latest` cannot be written: the error says the checkpoint is committed, and where.
  expect_error([&] { run.save(3, "latest"); }, "step_000003 is committed and complete, but " +
                                                   (run.checkpoints / "latest").string());
  verify_checkpoint(run.dir(3));
  EXPECT_EQ(run.latest(), "step_000002");
  EXPECT_EQ(resolve_checkpoint(run.run.string()), run.dir(3));
  // Once `latest` is written again, it is what a resume takes.
  run.save(4);
  EXPECT_EQ(resolve_checkpoint(run.run.string()), run.dir(4));
}

// Rank 0 ends between the rename and `latest` (BOOSTLM_CHECKPOINT_FAULT=die-commit@0): the next
// start resumes from the checkpoint it committed, not the one `latest` still names.
TEST(CheckpointCommit, ADeathAfterTheRenameLeavesTheCheckpointFound) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  CommitRun run("commit_die");
  run.save(1);
  EXPECT_EXIT(run.save(2, "die-commit"), ::testing::ExitedWithCode(86), "dies after the commit");
  EXPECT_EQ(run.latest(), "step_000001");
  verify_checkpoint(run.dir(2));
  EXPECT_EQ(resolve_checkpoint(run.run.string()), run.dir(2));
  verify_checkpoint(run.dir(1));
}

TEST(Checksum, DoesNotDependOnHowTheBytesAreSplit) {
  std::string text(1000, 'x');
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i * 7);
  Checksum64 pieces;
  pieces.update(text.data(), 3);
  pieces.update(text.data() + 3, 40);
  pieces.update(text.data() + 43, text.size() - 43);
  EXPECT_EQ(pieces.digest(), Checksum64::of(text.data(), text.size()));
  text[500] ^= 1;
  EXPECT_NE(pieces.digest(), Checksum64::of(text.data(), text.size()));
}

}  // namespace
}  // namespace boostlm

namespace boostlm {
namespace {

// A Hugging Face LLaMA config's numbers go through ModelConfig's own checks: a float, a number
// past int64 (which nlohmann parses as a float) or a head_dim other than hidden_size / heads is
// refused, naming the file and the field.
TEST(HfConfig, RefusesMalformedNumbersNamingTheField) {
  const nlohmann::json good = {{"model_type", "llama"},    {"vocab_size", 64},
                               {"hidden_size", 32},        {"num_hidden_layers", 2},
                               {"num_attention_heads", 4}, {"intermediate_size", 48}};
  EXPECT_EQ(hf_config_to_model(good, "config.json").head_dim(), 8);
  auto error_of = [](const nlohmann::json& j) {
    try {
      hf_config_to_model(j, "config.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  nlohmann::json j = good;
  j["num_attention_heads"] = nlohmann::json::parse("1e300");
  std::string message = error_of(j);
  EXPECT_NE(message.find("config.json"), std::string::npos) << message;
  EXPECT_NE(message.find("'n_heads' has the wrong type: it must be an integer"), std::string::npos)
      << message;
  j = good;
  j["hidden_size"] = nlohmann::json::parse("244444444444444444444444444444444444444444");
  message = error_of(j);
  EXPECT_NE(message.find("'d_model' has the wrong type"), std::string::npos) << message;
  j = good;
  j["head_dim"] = 16;
  message = error_of(j);
  EXPECT_NE(message.find("head_dim"), std::string::npos) << message;
  EXPECT_NE(message.find("hidden_size / num_attention_heads"), std::string::npos) << message;
  j["head_dim"] = 8;
  EXPECT_EQ(error_of(j), "");
}

}  // namespace
}  // namespace boostlm
