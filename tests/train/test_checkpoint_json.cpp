// The JSON files of a checkpoint: every field checked for type and range, with the file named.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "checkpoint/checkpoint_json.h"

namespace boostlm {
namespace {

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string state_error(const std::string& text) {
  TrainingState state;
  return error_of([&] { parse_trainer_state(text, "trainer_state.json", state); });
}

TEST(TrainerStateJson, ReadsWhatTheTrainerWrites) {
  TrainingState state;
  const int64_t optimizer_step = parse_trainer_state(
      R"({"step": 5, "tokens_seen": 640, "optimizer_step": 5, "loader": {"step": 5},
          "extra": {"seed": 1}})",
      "s", state);
  EXPECT_EQ(optimizer_step, 5);
  EXPECT_EQ(state.step, 5);
  EXPECT_EQ(state.tokens_seen, 640);
  EXPECT_EQ(state.loader["step"], 5);
  EXPECT_EQ(state.extra["seed"], 1);
}

TEST(TrainerStateJson, RefusesFractionalNegativeOrHugeCounts) {
  const std::string rest = R"(, "tokens_seen": 1, "optimizer_step": 1, "loader": {}})";
  EXPECT_NE(state_error(R"({"step": 2.5)" + rest).find("'step' must be a whole number, not 2.5"),
            std::string::npos);
  // 1e300 as an int64 would be undefined behaviour, not an error, without the type check.
  EXPECT_NE(state_error(R"({"step": 1e300)" + rest).find("must be a whole number"),
            std::string::npos);
  EXPECT_NE(state_error(R"({"step": -1)" + rest).find("'step' is -1, outside [0, 2^53]"),
            std::string::npos);
  EXPECT_NE(state_error(R"({"step": 18446744073709551615)" + rest).find("outside [0, 2^53]"),
            std::string::npos);
  EXPECT_NE(state_error(R"({"tokens_seen": 1, "loader": {}})").find("lacks 'step'"),
            std::string::npos);
  EXPECT_NE(state_error("[1, 2]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(state_error(R"({"step": 1, "tokens_seen": 1, "optimizer_step": 1, "loader": 3})")
                .find("lacks the loader's state"),
            std::string::npos);
}

TEST(ChecksumsJson, RefusesNamesOutsideTheDirectoryAndNonStringChecksums) {
  auto checksums_error = [](const std::string& text) {
    return error_of([&] { parse_checksums(text, "checksums.json"); });
  };
  EXPECT_EQ(parse_checksums(R"({"model.safetensors": "00ff"})", "c").at("model.safetensors"),
            "00ff");
  EXPECT_NE(checksums_error(R"({"../../etc/passwd": "00"})").find("is not a file name"),
            std::string::npos);
  EXPECT_NE(checksums_error(R"({"..": "00"})").find("is not a file name"), std::string::npos);
  EXPECT_NE(checksums_error(R"({"a": 12})").find("the checksum of a is not a string"),
            std::string::npos);
  EXPECT_NE(checksums_error("[]").find("expected an object"), std::string::npos);
  EXPECT_NE(checksums_error("{").find("checksums.json is not valid JSON"), std::string::npos);
}

// boostlm's own config.json section; a Hugging Face config is hf_import's (test_hf_llama.sh).
TEST(CheckpointConfigJson, ReadsTheBoostlmSectionAndNamesWhatIsMissing) {
  const ModelConfig c = parse_checkpoint_config(
      R"({"boostlm": {"arch": "dense", "vocab_size": 64, "d_model": 32, "n_layers": 2,
          "n_heads": 4, "d_ff": 48}})",
      "config.json");
  EXPECT_EQ(c.arch, Arch::dense);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_NE(error_of([] {
              parse_checkpoint_config(R"({"vocab_size": 64})", "config.json");
            }).find("no \"boostlm\" section"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_checkpoint_config("7", "config.json"); }).find("JSON object"),
            std::string::npos);
}

}  // namespace
}  // namespace boostlm
