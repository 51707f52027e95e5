#include "data/loader.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <utility>

#include "core/error.h"
#include "core/file_io.h"
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
  if (state.is_object() && state.value("kind", "") == "shards")
    throw error(source_, ": the checkpoint's loader read a list of shards, not one token file; ",
                "resume it on the data it was trained on, or start a new run with --init-from");
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

struct ShardLoader::Shard {
  std::string name;  // file name: what the state records, so a moved directory still resumes
  std::string path;
  std::unique_ptr<MappedFile> file;
  ShardHeader header;
  int64_t windows = 0;
};

namespace {

// The window of B*T+1 tokens from token `start` of a mapped shard, as inputs and targets; with
// vocab_size > 0 each token is checked below it, so a shard of another vocabulary is reported by
// name and position instead of indexing past the embedding.
Batch read_mapped_window(const MappedFile& file, int bytes_per_token, int64_t start,
                         int64_t batch_size, int64_t seq_len, int64_t vocab_size) {
  const int64_t count = batch_size * seq_len;
  const unsigned char* data = file.data() + kShardHeaderWords * sizeof(int32_t);
  std::vector<int32_t> tokens(static_cast<size_t>(count + 1));
  for (int64_t i = 0; i <= count; ++i) {
    uint32_t value = 0;
    std::memcpy(&value, data + (start + i) * bytes_per_token, static_cast<size_t>(bytes_per_token));
    if (vocab_size > 0 && value >= static_cast<uint64_t>(vocab_size))
      throw error(file.path(), ": token ", value, " at position ", start + i,
                  " is outside the vocabulary [0, ", vocab_size, ")");
    tokens[i] = static_cast<int32_t>(value);
  }
  return {batch_size, seq_len, std::vector<int32_t>(tokens.begin(), tokens.end() - 1),
          std::vector<int32_t>(tokens.begin() + 1, tokens.end())};
}

// Flag names as the command line spells them, for messages about a saved state.
const std::map<std::string, std::string>& flag_names() {
  static const std::map<std::string, std::string> flags = {{"batch_size", "--batch-size"},
                                                           {"seq_len", "--seq-len"},
                                                           {"shuffle", "--shuffle"},
                                                           {"seed", "--seed"}};
  return flags;
}

}  // namespace

ShardLoader::ShardLoader(const std::vector<std::string>& shard_paths, const LoaderConfig& config,
                         int64_t vocab_size)
    : config_(config), vocab_size_(vocab_size) {
  const std::string source = shard_paths.empty() ? "(no shards)" : shard_paths.front();
  check_config(config_, source);
  if (shard_paths.empty()) throw error("the training data lists no shards");
  const int64_t window_tokens = config_.batch_size * config_.seq_len;
  for (const std::string& path : shard_paths) {
    auto shard = std::make_unique<Shard>();
    shard->path = path;
    shard->name = std::filesystem::path(path).filename().string();
    if (by_name_.contains(shard->name))
      throw error(path, ": two shards named ", shard->name, " in one list");
    shard->header = read_shard_header(path);
    shard->file = std::make_unique<MappedFile>(path);
    parse_shard_header(shard->file->data(), shard->file->size(),
                       static_cast<int64_t>(shard->file->size()), path);  // the mapped bytes too
    shard->windows =
        DataLoader::full_windows(shard->header.num_tokens, config_.batch_size, config_.seq_len);
    num_tokens_ += shard->header.num_tokens;
    windows_per_epoch_ += shard->windows;
    by_name_[shard->name] = shards_.size();
    shards_.push_back(std::move(shard));
  }
  if (windows_per_epoch_ == 0)
    throw error(source, ": no shard of the ", shard_paths.size(),
                " holds one batch of B*T+1 = ", window_tokens + 1,
                " tokens (B=", config_.batch_size, ", T=", config_.seq_len, ")");
  start_epoch(cursor_, 0);
}

ShardLoader::~ShardLoader() = default;

const ShardLoader::Shard& ShardLoader::shard(const std::string& name) const {
  return *shards_.at(by_name_.at(name));
}

void ShardLoader::start_epoch(Cursor& cursor, int64_t epoch) const {
  cursor.epoch = epoch;
  cursor.position = 0;
  cursor.window = 0;
  cursor.order.clear();
  std::vector<const Shard*> readable;
  for (const auto& s : shards_)
    if (s->windows > 0) readable.push_back(s.get());
  if (config_.shuffle) {
    Rng rng(splitmix64(config_.seed) ^ splitmix64(static_cast<uint64_t>(epoch) + 0x51a7d5ull));
    for (int64_t i : shuffled_indices(static_cast<int64_t>(readable.size()), rng))
      cursor.order.push_back(readable[i]->name);
  } else {
    for (const Shard* s : readable) cursor.order.push_back(s->name);
  }
}

void ShardLoader::advance(Cursor& cursor, int64_t windows) const {
  cursor.window += windows;
  for (;;) {
    const int64_t held = shard(cursor.order[cursor.position]).windows;
    if (cursor.window < held) return;
    cursor.window -= held;
    if (++cursor.position == static_cast<int64_t>(cursor.order.size())) {
      const int64_t left = cursor.window;
      start_epoch(cursor, cursor.epoch + 1);
      cursor.window = left;
    }
  }
}

int64_t ShardLoader::window_start(const Shard& s, int64_t epoch, int64_t slot) {
  const int64_t window_tokens = config_.batch_size * config_.seq_len;
  if (!config_.shuffle) return slot * window_tokens;
  const std::string key = s.name + "#" + std::to_string(epoch);
  if (key != cached_key_) {
    const uint64_t name_hash = Checksum64::of(s.name.data(), s.name.size());
    Rng rng(splitmix64(config_.seed) ^ splitmix64(static_cast<uint64_t>(epoch) + 0x5bd1e995ull) ^
            splitmix64(name_hash));
    cached_order_ = shuffled_indices(s.windows, rng);
    cached_key_ = key;
  }
  return cached_order_[slot] * window_tokens;
}

Batch ShardLoader::read(const Cursor& cursor) {
  const Shard& s = shard(cursor.order[cursor.position]);
  const int64_t start = window_start(s, cursor.epoch, cursor.window);
  return read_mapped_window(*s.file, s.header.bytes_per_token, start, config_.batch_size,
                            config_.seq_len, vocab_size_);
}

Batch ShardLoader::next() {
  Cursor mine = cursor_;
  advance(mine, config_.dp_rank);
  Batch batch = read(mine);
  advance(cursor_, config_.dp_size);
  windows_read_ += config_.dp_size;
  return batch;
}

nlohmann::json ShardLoader::state() const {
  nlohmann::json order = nlohmann::json::array();
  for (const std::string& name : cursor_.order)
    order.push_back({{"name", name}, {"tokens", shard(name).header.num_tokens}});
  return {{"kind", "shards"},
          {"epoch", cursor_.epoch},
          {"order", order},
          {"position", cursor_.position},
          {"window", cursor_.window},
          {"windows_read", windows_read_},
          {"num_tokens", num_tokens_},
          {"batch_size", config_.batch_size},
          {"seq_len", config_.seq_len},
          {"dp_size", config_.dp_size},
          {"shuffle", config_.shuffle},
          {"seed", config_.seed}};
}

void ShardLoader::load_state(const nlohmann::json& state) {
  const std::string source = shards_.front()->path;
  if (!state.is_object() || state.value("kind", "") != "shards")
    throw error(source, ": the checkpoint's loader read one token file (train.bin), not a list of ",
                "shards; resume it on the data it was trained on, or start a new run with ",
                "--init-from");
  for (const auto& [key, flag] : flag_names()) {
    if (!state.contains(key)) throw error(source, ": loader state lacks '", key, "'");
    const nlohmann::json now = key == "batch_size" ? nlohmann::json(config_.batch_size)
                               : key == "seq_len"  ? nlohmann::json(config_.seq_len)
                               : key == "shuffle"  ? nlohmann::json(config_.shuffle)
                                                   : nlohmann::json(config_.seed);
    if (state.at(key) != now)
      throw error(source, ": the loader state was saved with ", flag, " ", state.at(key).dump(),
                  " but this run has ", flag, " ", now.dump());
  }
  Cursor cursor;
  try {
    cursor.epoch = state.at("epoch").get<int64_t>();
    cursor.position = state.at("position").get<int64_t>();
    cursor.window = state.at("window").get<int64_t>();
    windows_read_ = state.at("windows_read").get<int64_t>();
    for (const nlohmann::json& entry : state.at("order")) {
      const std::string name = entry.at("name").get<std::string>();
      const int64_t tokens = entry.at("tokens").get<int64_t>();
      if (!by_name_.contains(name))
        throw error(source, ": the checkpoint was reading shard ", name,
                    ", which the training data no longer lists; put it back to resume exactly");
      if (shard(name).header.num_tokens != tokens)
        throw error(shard(name).path, " holds ", shard(name).header.num_tokens,
                    " tokens but the checkpoint read it when it held ", tokens,
                    "; a shard must not change under a run");
      cursor.order.push_back(name);
    }
  } catch (const nlohmann::json::exception& e) {
    throw error(source, ": malformed loader state: ", e.what());
  }
  if (cursor.position < 0 || cursor.position >= static_cast<int64_t>(cursor.order.size()) ||
      cursor.window < 0 || cursor.window >= shard(cursor.order[cursor.position]).windows)
    throw error(source, ": loader state points outside its shards");
  cursor_ = std::move(cursor);
}

struct EvalWindows::Shard {
  std::string path;
  ShardHeader header;
  int64_t windows = 0;
  int64_t first_window = 0;          // index in the sequence of this shard's window 0
  std::unique_ptr<MappedFile> file;  // mapped when one of its windows is first read
};

EvalWindows::EvalWindows(const std::vector<std::string>& shard_paths, int64_t batch_size,
                         int64_t seq_len, int64_t vocab_size)
    : batch_size_(batch_size), seq_len_(seq_len), vocab_size_(vocab_size) {
  LoaderConfig config;
  config.batch_size = batch_size;
  config.seq_len = seq_len;
  check_config(config, shard_paths.empty() ? "(no shards)" : shard_paths.front());
  if (shard_paths.empty()) throw error("the evaluation data lists no shards");
  for (const std::string& path : shard_paths) {
    auto shard = std::make_unique<Shard>();
    shard->path = path;
    shard->header = read_shard_header(path);
    shard->windows = DataLoader::full_windows(shard->header.num_tokens, batch_size, seq_len);
    shard->first_window = windows_;
    num_tokens_ += shard->header.num_tokens;
    windows_ += shard->windows;
    shards_.push_back(std::move(shard));
  }
}

EvalWindows::~EvalWindows() = default;

std::vector<std::string> EvalWindows::shards_holding(int64_t windows) const {
  std::vector<std::string> paths;
  for (const auto& shard : shards_)
    if (shard->windows > 0 && shard->first_window < windows) paths.push_back(shard->path);
  return paths;
}

Batch EvalWindows::window(int64_t index) {
  BOOSTLM_ASSERT_MSG(index >= 0 && index < windows_, "evaluation window index out of range");
  // The last shard whose first window is at or before `index` (shards without windows share
  // their successor's first_window, and are passed over since they hold none).
  auto it = std::upper_bound(shards_.begin(), shards_.end(), index,
                             [](int64_t i, const auto& shard) { return i < shard->first_window; });
  Shard& shard = **std::prev(it);
  if (!shard.file) {
    auto file = std::make_unique<MappedFile>(shard.path);
    const ShardHeader now = parse_shard_header(file->data(), file->size(),
                                               static_cast<int64_t>(file->size()), shard.path);
    if (now.num_tokens != shard.header.num_tokens ||
        now.bytes_per_token != shard.header.bytes_per_token)
      throw error(shard.path, " holds ", now.num_tokens, " tokens but held ",
                  shard.header.num_tokens, " when its header was read; a shard must not change ",
                  "while it is evaluated");
    shard.file = std::move(file);
  }
  const int64_t start = (index - shard.first_window) * batch_size_ * seq_len_;
  return read_mapped_window(*shard.file, shard.header.bytes_per_token, start, batch_size_, seq_len_,
                            vocab_size_);
}

}  // namespace boostlm
