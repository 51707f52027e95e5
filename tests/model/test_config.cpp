// Bad configurations are refused with a message naming what is wrong, never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"

namespace boostlm {
namespace {

nlohmann::json base() {
  return {{"arch", "cola"}, {"vocab_size", 100}, {"d_model", 64},
          {"n_layers", 2},  {"n_heads", 4},      {"n_kv_heads", 2},
          {"d_ff", 96},     {"attn_rank", 16},   {"mlp_rank", 24}};
}

void expect_error(const nlohmann::json& j, const std::string& fragment) {
  try {
    ModelConfig::from_json(j);
    ADD_FAILURE() << "accepted: " << j.dump();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << "message '" << e.what() << "' does not mention '" << fragment << "'";
  }
}

TEST(Config, AcceptsAValidConfigAndRoundTrips) {
  const ModelConfig c = ModelConfig::from_json(base());
  EXPECT_EQ(c.head_dim(), 16);
  EXPECT_EQ(c.kv_dim(), 32);
  const ModelConfig again = ModelConfig::from_json(c.to_json());
  EXPECT_EQ(again.to_json(), c.to_json());
}

TEST(Config, RejectsHeadsNotDivisibleByKvHeads) {
  auto j = base();
  j["n_kv_heads"] = 3;
  expect_error(j, "n_heads=4 is not divisible by n_kv_heads=3");
}

TEST(Config, RejectsRankLargerThanTheDimensionItFactorises) {
  auto j = base();
  j["attn_rank"] = 40;  // k/v project 64 -> 32
  expect_error(j, "attn_rank=40 exceeds");
  j = base();
  j["mlp_rank"] = 97;
  expect_error(j, "mlp_rank=97 exceeds");
}

// Issue 31: each projection family may have its own rank; attn_rank and mlp_rank are the
// shorthands for the families without one, and stay what config.json holds when ranks agree.
TEST(Config, ReadsPerFamilyRanksWithTheShorthandsForTheRest) {
  auto j = base();
  j["k_rank"] = 8;
  j["down_rank"] = 32;
  const ModelConfig c = ModelConfig::from_json(j);
  EXPECT_EQ(c.rank(ProjKind::q), 16);
  EXPECT_EQ(c.rank(ProjKind::k), 8);
  EXPECT_EQ(c.rank(ProjKind::v), 16);
  EXPECT_EQ(c.rank(ProjKind::o), 16);
  EXPECT_EQ(c.rank(ProjKind::gate), 24);
  EXPECT_EQ(c.rank(ProjKind::down), 32);
  // Written back: each family of a kind whose ranks differ, and no shorthand for that kind.
  const nlohmann::json w = c.to_json();
  EXPECT_EQ(w["q_rank"], 16);
  EXPECT_EQ(w["k_rank"], 8);
  EXPECT_EQ(w["up_rank"], 24);
  EXPECT_EQ(w["down_rank"], 32);
  EXPECT_FALSE(w.contains("attn_rank"));
  EXPECT_FALSE(w.contains("mlp_rank"));
  EXPECT_EQ(ModelConfig::from_json(w).ranks(), c.ranks());
  EXPECT_EQ(ModelConfig::from_json(w).to_json(), w);
  EXPECT_EQ(c.ranks_text(), "q 16, k 8, v 16, o 16, gate 24, up 24, down 32");
}

TEST(Config, KeepsTheShorthandsWhenRanksAgree) {
  auto j = base();
  j["q_rank"] = 16;  // equal to attn_rank: nothing differs
  const nlohmann::json w = ModelConfig::from_json(j).to_json();
  EXPECT_EQ(w["attn_rank"], 16);
  EXPECT_EQ(w["mlp_rank"], 24);
  for (const char* f :
       {"q_rank", "k_rank", "v_rank", "o_rank", "gate_rank", "up_rank", "down_rank"})
    EXPECT_FALSE(w.contains(f)) << f;
  // Every attention family given alone: no attn_rank needed; equal ones write the shorthand.
  j = base();
  j.erase("attn_rank");
  for (const char* f : {"q_rank", "k_rank", "v_rank", "o_rank"}) j[f] = 8;
  const ModelConfig c = ModelConfig::from_json(j);
  EXPECT_EQ(c.to_json()["attn_rank"], 8);
  EXPECT_EQ(c.ranks_text(), "attn 8, mlp 24");
  ModelConfig set = c;
  set.set_ranks({8, 8, 8, 8, 24, 24, 24});
  EXPECT_EQ(set.attn_rank, 8);
  EXPECT_EQ(set.family_ranks, (std::array<int64_t, kProjectionsPerBlock>{}));
}

TEST(Config, RefusesABadFamilyRankNamingIt) {
  auto j = base();
  j["k_rank"] = 40;  // k projects 64 -> 32
  expect_error(j, "k_rank=40 exceeds the dimension it factorises: the k projection is 64 x 32");
  j = base();
  j["attn_rank"] = 64;  // fine for q and o, too wide for k: the shorthand is named, and the fix
  expect_error(j,
               "attn_rank=64 exceeds the dimension it factorises: the k projection is 64 x 32, "
               "so its rank can be at most 32 (give k_rank to set its rank alone)");
  j["k_rank"] = 32;
  j["v_rank"] = 32;
  EXPECT_NO_THROW(ModelConfig::from_json(j));  // the GQA model at attention rank 64
  j = base();
  j["up_rank"] = 0;
  expect_error(j, "up_rank=0 must be positive");
  j = base();
  j["gate_rank"] = 8.5;
  expect_error(j, "field 'gate_rank' has the wrong type");
  j = base();
  j.erase("mlp_rank");
  j["gate_rank"] = 8;
  expect_error(j, "missing required field 'mlp_rank'");  // up and down have none
}

// LaX (issue 48): its gate and σ switch round-trip, have defaults, and belong to lax alone.
TEST(Config, ReadsLaxFieldsAndRefusesThemElsewhere) {
  auto j = base();
  j["arch"] = "lax";
  ModelConfig c = ModelConfig::from_json(j);
  EXPECT_EQ(c.arch, Arch::lax);
  EXPECT_EQ(c.lax_gate, LaxGate::kron);
  EXPECT_TRUE(c.lax_latent_act);
  EXPECT_TRUE(c.latent_act());
  j["lax_gate"] = "linear";
  j["lax_latent_act"] = false;
  c = ModelConfig::from_json(j);
  EXPECT_EQ(c.lax_gate, LaxGate::linear);
  EXPECT_FALSE(c.latent_act());
  EXPECT_EQ(ModelConfig::from_json(c.to_json()).to_json(), c.to_json());
  EXPECT_EQ(c.to_json()["lax_gate"], "linear");
  j["lax_gate"] = "diagonal";
  expect_error(j, "lax_gate");
  auto cola = base();
  cola["lax_gate"] = "kron";
  expect_error(cola, "LaX");
  // The most balanced factor pair, larger first.
  EXPECT_EQ(kron_factors(256), std::make_pair(int64_t{16}, int64_t{16}));
  EXPECT_EQ(kron_factors(96), std::make_pair(int64_t{12}, int64_t{8}));
  EXPECT_EQ(kron_factors(128), std::make_pair(int64_t{16}, int64_t{8}));
  EXPECT_EQ(kron_factors(7), std::make_pair(int64_t{7}, int64_t{1}));
}

TEST(Config, RejectsUnknownArchitecture) {
  auto j = base();
  j["arch"] = "lora";
  expect_error(j, "unknown arch 'lora'");
}

TEST(Config, RejectsMissingAndUnknownAndMistypedFields) {
  auto j = base();
  j.erase("d_ff");
  expect_error(j, "missing required field 'd_ff'");
  j = base();
  j.erase("attn_rank");
  expect_error(j, "missing required field 'attn_rank'");
  j = base();
  j["dmodel"] = 64;
  expect_error(j, "unknown field 'dmodel'");
  j = base();
  j["n_layers"] = "two";
  expect_error(j, "field 'n_layers' has the wrong type");
  j = base();
  j["vocab_size"] = 1e300;  // found by fuzz_config: the conversion to int64 was undefined
  expect_error(j, "field 'vocab_size' has the wrong type: it must be an integer (found 1e+300)");
  j = base();
  j["d_model"] = 0;
  expect_error(j, "d_model=0 must be positive");
}

// nlohmann's get<int64_t>() turns 128.5 into 128 without a word; a config says what it means.
TEST(Config, RejectsFractionalIntegers) {
  auto j = base();
  j["d_model"] = 128.5;
  expect_error(j, "field 'd_model' has the wrong type: it must be an integer (found 128.5)");
  j = base();
  j["n_layers"] = true;
  expect_error(j, "field 'n_layers' has the wrong type");
  j = base();
  j["rms_eps"] = "1e-5";
  expect_error(j, "field 'rms_eps' has the wrong type");
}

TEST(Config, WarnsThatADenseModelIgnoresRanks) {
  auto j = base();
  j["arch"] = "dense";
  ::testing::internal::CaptureStderr();
  const ModelConfig c = ModelConfig::from_json(j);
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("warning: config: attn_rank and mlp_rank are ignored"), std::string::npos)
      << said;
  EXPECT_EQ(c.attn_rank, 0);
}

TEST(Config, DenseNeedsNoRanks) {
  auto j = base();
  j["arch"] = "dense";
  j.erase("attn_rank");
  j.erase("mlp_rank");
  EXPECT_NO_THROW(ModelConfig::from_json(j));
}

TEST(Config, LoadReportsTheFileForBadJson) {
  const auto path = std::filesystem::temp_directory_path() / "boostlm_bad_config.json";
  std::ofstream(path) << "{ \"arch\": ";
  try {
    ModelConfig::load(path.string());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ModelConfig::load("/nonexistent/config.json"), Error);
}

TEST(Config, EveryPresetLoads) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(BOOSTLM_SOURCE_DIR "/configs")) {
    if (entry.path().extension() != ".json") continue;
    EXPECT_NO_THROW(ModelConfig::load(entry.path().string())) << entry.path();
    ++count;
  }
  EXPECT_GE(count, 18);  // 6 shapes x 3 architectures
}

}  // namespace
}  // namespace boostlm
