#include "train/checkpoint.h"

#include "checkpoint/index.h"
#include "checkpoint/reader.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <optional>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/file_io.h"
#include "data/tokenizer.h"
#include "formats/hf_export.h"
#include "formats/hf_import.h"
#include "formats/safetensors.h"
#include "model/params.h"
#include "parallel/sharding.h"
#include "train/run_dir.h"

namespace boostlm {

namespace fs = std::filesystem;

namespace {

constexpr const char* kChecksums = "checksums.json";

std::string json_text(const nlohmann::json& json) { return json.dump(2) + "\n"; }

}  // namespace

RootFiles checkpoint_root_files(const ModelConfig& model_config, const nlohmann::json& extra,
                                const std::string& tokenizer_path, const TrainingState* state,
                                int64_t optimizer_step) {
  RootFiles files;
  nlohmann::json config = hf_config(model_config);
  if (extra.is_object()) config.update(extra);
  files.texts.emplace_back("config.json", json_text(config));
  if (!tokenizer_path.empty()) {
    // tokenizer.model or tokenizer.json by content; a tokenizer.json brings the
    // tokenizer_config.json beside it (its BOS and EOS).
    const std::string name = tokenizer_file_name(tokenizer_path);
    files.copies.emplace_back(name, tokenizer_path);
    const fs::path beside = fs::path(tokenizer_path).parent_path() / "tokenizer_config.json";
    if (name == "tokenizer.json" && fs::is_regular_file(beside))
      files.copies.emplace_back("tokenizer_config.json", beside.string());
  }
  if (state)
    files.texts.emplace_back("trainer_state.json",
                             json_text({{"step", state->step},
                                        {"tokens_seen", state->tokens_seen},
                                        {"optimizer_step", optimizer_step},
                                        {"loader", state->loader},
                                        {"extra", state->extra}}));
  return files;
}

CheckpointWrite checkpoint_of(const Model& model, const AdamW* optimizer,
                              const TrainingState* state, std::string tokenizer) {
  CheckpointWrite w;
  w.config = &model.config();
  w.table = &model.params();
  w.weights = &model.weights();
  if (optimizer && state) {
    w.exp_avg = &optimizer->first_moment();
    w.exp_avg_sq = &optimizer->second_moment();
    w.optimizer_step = optimizer->steps_taken();
    w.state = state;
  }
  w.tokenizer_path = std::move(tokenizer);
  return w;
}

void save_checkpoint(const std::string& dir, const CheckpointWrite& what) {
  BOOSTLM_ASSERT(what.config && what.table && what.weights);
  for (const auto& p : what.table->entries())
    BOOSTLM_ASSERT_MSG(p.shard_axis < 0, "save_checkpoint saves whole tensors; a job of several "
                                         "ranks saves through CheckpointSaver");
  const bool moments = what.exp_avg && what.exp_avg_sq && what.state;
  RankState state;
  state.table = what.table;
  state.full_table = what.table;
  state.weights = what.weights;
  if (moments) {
    state.exp_avg = what.exp_avg;
    state.exp_avg_sq = what.exp_avg_sq;
  }
  Communicator self;
  CheckpointSaver saver(self, ShardRanks{}, /*async=*/false);
  saver.begin(dir, state,
              checkpoint_root_files(*what.config, what.config_extra, what.tokenizer_path,
                                    moments ? what.state : nullptr, what.optimizer_step));
}

namespace {

// The checkpoint committed after `latest` was last written, if any: its commit ended before it
// could name it (rank 0 died, or `latest` could not be written). The commit writes
// checksums.json, renames the directory into place and then writes `latest`, so such a checkpoint
// is newer than `latest` both in its step and in its checksums.json's time. Checkpoints that a run
// resumed from an older one abandoned are older in time, and a copied run directory (new times
// throughout) has no step above its `latest`'s.
std::optional<fs::path> committed_since_latest(const fs::path& checkpoints) {
  std::error_code ec;
  const auto latest_time = fs::last_write_time(checkpoints / "latest", ec);
  const bool no_latest = static_cast<bool>(ec);
  const std::string latest = no_latest ? "" : latest_checkpoint_name(checkpoints);
  int64_t latest_step = -1;
  for (const CheckpointEntry& e : list_checkpoints(checkpoints))
    if (e.dir.filename() == latest) latest_step = e.step;
  std::optional<fs::path> newest;
  for (const CheckpointEntry& e : list_checkpoints(checkpoints)) {  // by step, ascending
    const auto t = fs::last_write_time(e.dir / kChecksums, ec);
    if (ec || e.step <= latest_step || (!no_latest && t <= latest_time)) continue;
    newest = e.dir;
  }
  return newest;
}

}  // namespace

std::string resolve_checkpoint(const std::string& path) {
  const fs::path p(path);
  if (fs::exists(p / kChecksums) || fs::exists(p / "model.safetensors") ||
      fs::exists(p / "model.safetensors.index.json"))
    return p.string();
  const std::string latest = latest_checkpoint_name(p / "checkpoints");
  if (const auto newer = committed_since_latest(p / "checkpoints")) {
    std::fprintf(stderr,
                 "boostlm: %s was committed after %s was last written (%s); using it, the "
                 "newest complete checkpoint\n",
                 newer->c_str(), (p / "checkpoints" / "latest").c_str(),
                 latest.empty() ? "which does not exist" : ("which names " + latest).c_str());
    return newer->string();
  }
  if (!latest.empty()) {
    const fs::path dir = p / "checkpoints" / latest;
    if (fs::is_directory(dir)) return dir.string();
    // `latest` is written after its checkpoint and pruning spares it, so this is damage from
    // outside: say so, and take the newest checkpoint there is.
    const auto all = list_checkpoints(p / "checkpoints");
    if (all.empty())
      throw error("checkpoint: ", (p / "checkpoints" / "latest").string(), " names ", latest,
                  ", which does not exist, and there is no other checkpoint");
    std::fprintf(stderr, "boostlm: %s names %s, which does not exist; using %s\n",
                 (p / "checkpoints" / "latest").c_str(), latest.c_str(), all.back().dir.c_str());
    return all.back().dir.string();
  }
  throw error("checkpoint: '", path, "' is neither a checkpoint directory nor a run directory ",
              "with checkpoints/latest");
}

void verify_checkpoint(const std::string& dir, bool contents) {
  const fs::path d(dir);
  if (!fs::is_directory(d)) throw error("checkpoint: '", dir, "' is not a directory");
  if (is_hf_directory(dir)) return verify_hf_directory(dir);
  if (!fs::exists(d / kChecksums))
    throw error("checkpoint: '", dir, "' has no ", kChecksums,
                " (incomplete or not written by boostlm)");
  const std::string checksums_path = (d / kChecksums).string();
  const auto listed = parse_checksums(read_text_file(checksums_path), checksums_path);
  // What a loader reads and checksums.json does not list was put there since the commit: refused
  // rather than read unchecked.
  for (const auto& e : fs::directory_iterator(d)) {
    const std::string name = e.path().filename().string();
    const std::string ext = e.path().extension().string();
    if (name != kChecksums && (ext == ".safetensors" || ext == ".json") && !listed.contains(name))
      throw error("checkpoint: '", dir, "' holds ", name, ", which ", kChecksums,
                  " does not list: its contents cannot be checked (was it added after the "
                  "checkpoint was written?)");
  }
  for (const auto& [file, expected] : listed) {
    const fs::path path = d / file;
    if (!fs::exists(path)) throw error("checkpoint: '", dir, "' is missing ", file);
    if (!contents && path.extension() == ".safetensors") continue;  // checked when read
    MappedFile mapped(path.string());
    const std::string actual = Checksum64::hex(Checksum64::of(mapped.data(), mapped.size()));
    if (actual != expected)
      throw error("checkpoint: checksum mismatch for ", path.string(), " (expected ", expected,
                  ", found ", actual, "): the file is corrupt");
  }
}

TokenizerIdentity checkpoint_tokenizer(const std::string& dir) {
  return tokenizer_identity(dir);  // its tokenizer.model or tokenizer.json
}

ModelConfig read_checkpoint_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  const std::string text = read_text_file(path);
  // boostlm's own config.json carries its config under "boostlm"; anything else is read as a
  // Hugging Face LLaMA config (hf_import.h checks what it supports).
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.contains("boostlm")) return parse_checkpoint_config(text, path);
  try {
    return hf_config_to_model(j, path);
  } catch (const nlohmann::json::exception& e) {
    throw error("checkpoint: ", path, " lacks a field: ", e.what());
  } catch (const Error& e) {
    throw error("checkpoint: ", path, ": ", e.what());
  }
}

void load_checkpoint_weights(const std::string& dir, Model& model) {
  if (is_hf_directory(dir))
    return load_hf_weights(dir, model.params(), model.weights(), slice_tensor);
  CheckpointReader reader(dir);
  // A named copy: the pieces are read on the host and uploaded.
  HostView<float> weights(model.weights().data(), model.weights().size(), HostAccess::write,
                          "checkpoint load");
  for (const auto& p : model.params().entries()) {
    if (!reader.has(p.name)) throw error("checkpoint: ", dir, " is missing tensor '", p.name, "'");
    reader.read(p.name, piece_of(p), weights.data() + p.offset);
  }
  weights.upload();
  for (const auto& [name, entry] : reader.index().tensors) {
    const bool moment = name.size() > 8 && (name.ends_with(".exp_avg") || name.ends_with(".exp_avg_sq"));
    if (!moment && !model.full_params().find(name))
      throw error("checkpoint: ", dir, " has tensor '", name,
                  "' that this model does not (does the config match the checkpoint?)");
  }
}

CheckpointTensors::CheckpointTensors(const std::string& dir, const ModelConfig& config)
    : config_(config), table_(build_param_table(config)) {
  tensors_.config = &config_;
  tensors_.table = &table_;
  if (is_hf_directory(dir)) {
    whole_ = FlatBuffer(table_.total_elements());
    load_hf_weights(dir, table_, whole_, slice_tensor);
    tensors_.weights = &whole_;
    return;
  }
  reader_ = std::make_unique<CheckpointReader>(dir);
  for (const auto& p : table_.entries())
    if (!reader_->has(p.name))
      throw error("checkpoint: ", dir, " is missing tensor '", p.name, "'");
  tensors_.read = [reader = reader_.get()](const ParamInfo& p, float* out) {
    reader->read(p.name, whole_piece(p.shape), out);
  };
}

CheckpointTensors::~CheckpointTensors() = default;

bool has_training_state(const std::string& dir) {
  if (!fs::exists(fs::path(dir) / "trainer_state.json")) return false;
  if (!fs::exists(fs::path(dir) / kIndexFile))
    return fs::exists(fs::path(dir) / "optimizer.safetensors");
  for (const auto& [name, t] : CheckpointIndex::of_directory(dir).tensors)
    if (name.ends_with(".exp_avg")) return true;
  return false;
}

TrainingState read_trainer_state(const std::string& dir) {
  const std::string path = (fs::path(dir) / "trainer_state.json").string();
  TrainingState state;
  parse_trainer_state(read_text_file(path), path, state);
  return state;
}

int64_t load_training_state(const std::string& dir, const ParamTable& table, FlatBuffer& exp_avg,
                            FlatBuffer& exp_avg_sq, TrainingState& state, int64_t begin,
                            int64_t end) {
  if (!has_training_state(dir))
    throw error("checkpoint: '", dir, "' holds weights only (no optimizer or trainer state); ",
                "it cannot be resumed, only used to initialise a new run");
  if (end < 0) end = table.total_elements();
  BOOSTLM_ASSERT(exp_avg.size() >= end - begin && exp_avg_sq.size() >= end - begin);
  CheckpointReader reader(dir);
  // A named copy: the moments are read on the host and uploaded.
  HostView<float> m(exp_avg.data(), exp_avg.size(), HostAccess::write, "checkpoint load");
  HostView<float> v(exp_avg_sq.data(), exp_avg_sq.size(), HostAccess::write, "checkpoint load");
  for (const auto& p : table.entries()) {
    const TensorPiece want = piece_of(p, begin, end);
    if (want.numel() == 0) continue;
    const int64_t at = p.offset + want.flat_begin - begin;
    reader.read(p.name + ".exp_avg", want, m.data() + at);
    reader.read(p.name + ".exp_avg_sq", want, v.data() + at);
  }
  m.upload();
  v.upload();
  const std::string state_path = (fs::path(dir) / "trainer_state.json").string();
  return parse_trainer_state(read_text_file(state_path), state_path, state);
}

void load_training_state(const std::string& dir, AdamW& optimizer, TrainingState& state) {
  optimizer.set_steps_taken(load_training_state(dir, optimizer.table(), optimizer.first_moment(),
                                                optimizer.second_moment(), state,
                                                optimizer.begin(), optimizer.end()));
}

}  // namespace boostlm
