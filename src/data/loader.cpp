#include "data/loader.h"

#include <map>
#include <utility>

#include "core/error.h"
#include "core/rng.h"
#include "data/shard.h"
#include "data/shuffle.h"

namespace boostlm {
namespace {

void check_config(const LoaderConfig& c, const std::string& source) {
  if (c.batch_size < 1 || c.seq_len < 1) {
    throw error(source,
                ": loader needs batch_size >= 1 and seq_len >= 1, got batch_size=", c.batch_size,
                " seq_len=", c.seq_len);
  }
  if (c.dp_size < 1 || c.dp_rank < 0 || c.dp_rank >= c.dp_size) {
    throw error(source, ": loader needs 0 <= dp_rank < dp_size, got dp_rank=", c.dp_rank,
                " dp_size=", c.dp_size);
  }
}

void check_enough_tokens(int64_t num_tokens, int64_t batch_size, int64_t seq_len,
                         const std::string& source) {
  if (num_tokens < batch_size * seq_len + 1) {
    throw error(source, ": ", num_tokens,
                " tokens is too few for one batch of B*T+1 = ", batch_size * seq_len + 1,
                " tokens (B=", batch_size, ", T=", seq_len, ")");
  }
}

// (a * b) mod n for a, b >= 0, without overflowing at large step counts.
int64_t mul_mod(int64_t a, int64_t b, int64_t n) {
  return static_cast<int64_t>(static_cast<unsigned __int128>(a) * static_cast<uint64_t>(b) %
                              static_cast<uint64_t>(n));
}

Batch slice_window(const std::vector<int32_t>& tokens, int64_t start, int64_t batch_size,
                   int64_t seq_len) {
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t count = batch_size * seq_len;
  Batch batch{batch_size, seq_len, std::vector<int32_t>(count), std::vector<int32_t>(count)};
  int64_t pos = start % n;
  for (int64_t i = 0; i < count; ++i) {
    batch.inputs[i] = tokens[pos];
    pos = pos + 1 == n ? 0 : pos + 1;
    batch.targets[i] = tokens[pos];
  }
  return batch;
}

}  // namespace

DataLoader::DataLoader(std::vector<int32_t> tokens, const LoaderConfig& config, std::string source)
    : tokens_(std::move(tokens)), config_(config), source_(std::move(source)) {
  check_config(config_, source_);
  check_enough_tokens(num_tokens(), config_.batch_size, config_.seq_len, source_);
}

DataLoader DataLoader::from_shard(const std::string& path, const LoaderConfig& config) {
  return DataLoader(read_shard(path), config, path);
}

Batch DataLoader::next() {
  Batch batch = batch_at(step_);
  ++step_;
  return batch;
}

Batch DataLoader::batch_at(int64_t step) {
  return slice_window(tokens_, window_start(step), config_.batch_size, config_.seq_len);
}

void DataLoader::set_position(int64_t step) {
  if (step < 0) throw error(source_, ": loader position must be >= 0, got ", step);
  step_ = step;
}

int64_t DataLoader::windows_per_epoch() const {
  const int64_t window_tokens = config_.batch_size * config_.seq_len;
  return (num_tokens() + window_tokens - 1) / window_tokens;
}

int64_t DataLoader::window_start(int64_t step) {
  BOOSTLM_ASSERT(step >= 0);
  const int64_t global_window = step * config_.dp_size + config_.dp_rank;
  const int64_t window_tokens = config_.batch_size * config_.seq_len;
  if (!config_.shuffle) return mul_mod(global_window, window_tokens, num_tokens());
  const int64_t per_epoch = windows_per_epoch();
  const std::vector<int64_t>& order = epoch_permutation(global_window / per_epoch);
  return order[global_window % per_epoch] * window_tokens;
}

// A shuffle of the window slots seeded from (seed, epoch) only, so any process can
// recompute any epoch's order. Cached because consecutive steps almost always share an epoch.
const std::vector<int64_t>& DataLoader::epoch_permutation(int64_t epoch) {
  if (epoch == cached_epoch_) return permutation_;
  Rng rng(splitmix64(config_.seed) ^ splitmix64(static_cast<uint64_t>(epoch) + 0x5bd1e995ull));
  permutation_ = shuffled_indices(windows_per_epoch(), rng);
  cached_epoch_ = epoch;
  return permutation_;
}

nlohmann::json DataLoader::state() const {
  return {{"step", step_},
          {"num_tokens", num_tokens()},
          {"batch_size", config_.batch_size},
          {"seq_len", config_.seq_len},
          {"dp_size", config_.dp_size},
          {"shuffle", config_.shuffle},
          {"seed", config_.seed}};
}

void DataLoader::load_state(const nlohmann::json& state) {
  const nlohmann::json expected = this->state();
  for (const auto& [key, value] : expected.items()) {
    if (key == "step" || key == "dp_size") continue;
    if (!state.contains(key)) throw error(source_, ": loader state lacks '", key, "'");
    if (state.at(key) != value) {
      // Named as the command line spells them, since that is where a user changes them.
      static const std::map<std::string, std::string> flags = {{"batch_size", "--batch-size"},
                                                               {"seq_len", "--seq-len"},
                                                               {"shuffle", "--shuffle"},
                                                               {"seed", "--seed"}};
      const std::string name = flags.contains(key) ? flags.at(key) : key;
      throw error(source_, ": the loader state was saved with ", name, " ", state.at(key).dump(),
                  " but this run has ", name, " ", value.dump());
    }
  }
  if (!state.contains("step") || !state.at("step").is_number_integer()) {
    throw error(source_, ": loader state lacks an integer 'step'");
  }
  const int64_t step = state.at("step").get<int64_t>();
  if (!state.contains("dp_size") || !state.at("dp_size").is_number_integer() ||
      state.at("dp_size").get<int64_t>() < 1) {
    throw error(source_, ": loader state lacks a positive integer 'dp_size'");
  }
  // The dp_size ranks have read the first step·dp_size global windows together, so a run on a
  // different DP size goes on from the same window if that count divides evenly among its ranks
  // (a restart on fewer ranks: `launch --min-ranks`).
  const int64_t windows_read = step * state.at("dp_size").get<int64_t>();
  if (windows_read % config_.dp_size != 0) {
    throw error(source_, ": the loader state was saved with --dp ", state.at("dp_size").dump(),
                " after ", windows_read, " windows, which ", config_.dp_size,
                " data-parallel ranks cannot share evenly; resume with --dp ",
                state.at("dp_size").dump(), " or from another checkpoint");
  }
  set_position(windows_read / config_.dp_size);
}

Batch DataLoader::window(const std::vector<int32_t>& tokens, int64_t index, int64_t batch_size,
                         int64_t seq_len, const std::string& source) {
  LoaderConfig config;
  config.batch_size = batch_size;
  config.seq_len = seq_len;
  check_config(config, source);
  check_enough_tokens(static_cast<int64_t>(tokens.size()), batch_size, seq_len, source);
  if (index < 0) throw error(source, ": window index must be >= 0, got ", index);
  const int64_t start = mul_mod(index, batch_size * seq_len, static_cast<int64_t>(tokens.size()));
  return slice_window(tokens, start, batch_size, seq_len);
}

int64_t DataLoader::full_windows(int64_t num_tokens, int64_t batch_size, int64_t seq_len) {
  BOOSTLM_ASSERT(batch_size >= 1 && seq_len >= 1);
  return num_tokens < 1 ? 0 : (num_tokens - 1) / (batch_size * seq_len);
}

}  // namespace boostlm
