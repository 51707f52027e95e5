#include "train/checkpoint.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/file_io.h"
#include "data/tokenizer.h"
#include "formats/hf_export.h"
#include "formats/hf_import.h"
#include "formats/safetensors.h"
#include "parallel/sharding.h"
#include "train/run_dir.h"

namespace boostlm {

namespace fs = std::filesystem;

namespace {

constexpr const char* kChecksums = "checksums.json";

// The tensors of `table` in a host copy of a flat buffer (HostView).
std::vector<TensorToWrite> tensors_of(const ParamTable& table, const float* host,
                                      const std::string& suffix) {
  std::vector<TensorToWrite> out;
  for (const auto& p : table.entries()) {
    BOOSTLM_ASSERT_MSG(p.shard_axis < 0, "checkpoints hold full tensors; gather shards first");
    out.push_back({p.name + suffix, p.shape, host + p.offset});
  }
  return out;
}

// A named copy: the host's view of a flat buffer for writing it to a file (a download).
HostView<const float> host_copy(const FlatBuffer& buffer) {
  return HostView<const float>(buffer.data(), buffer.size(), HostAccess::read, "checkpoint save");
}

// Reads the full tensor `name` and keeps this rank's slice of it.
void read_slice(const SafetensorsReader& reader, const std::string& name, const ParamInfo& p,
                float* local, std::vector<float>& scratch) {
  if (p.shard_axis < 0) {
    reader.read(name, p.shape, local);
    return;
  }
  scratch.resize(p.full_numel());
  reader.read(name, p.shape, scratch.data());
  slice_tensor(p, scratch.data(), local);
}

void write_json(const fs::path& path, const nlohmann::json& json, nlohmann::json& checksums) {
  const std::string text = json.dump(2) + "\n";
  AtomicFile file(path.string());
  file.write(text);
  checksums[path.filename().string()] = Checksum64::hex(file.checksum());
  file.commit();
}

// Every file of a checkpoint, written into `temp`, with checksums.json last.
void write_checkpoint_files(const fs::path& temp, const CheckpointWrite& what) {
  nlohmann::json checksums = nlohmann::json::object();
  {
    const auto weights = host_copy(*what.weights);
    checksums["model.safetensors"] = Checksum64::hex(write_safetensors(
        (temp / "model.safetensors").string(), tensors_of(*what.table, weights.data(), ""),
        {{"format", "pt"}, {"producer", "boostlm"}}));
  }
  nlohmann::json config = hf_config(*what.config);
  if (what.config_extra.is_object()) config.update(what.config_extra);
  write_json(temp / "config.json", config, checksums);
  if (!what.tokenizer_path.empty()) {
    // tokenizer.model or tokenizer.json by content; a tokenizer.json brings the
    // tokenizer_config.json beside it (its BOS and EOS).
    std::vector<std::pair<std::string, fs::path>> files = {
        {tokenizer_file_name(what.tokenizer_path), what.tokenizer_path}};
    const fs::path config = fs::path(what.tokenizer_path).parent_path() / "tokenizer_config.json";
    if (files[0].first == "tokenizer.json" && fs::is_regular_file(config))
      files.emplace_back("tokenizer_config.json", config);
    for (const auto& [name, source] : files) {
      const std::string bytes = read_text_file(source.string());
      AtomicFile file((temp / name).string());
      file.write(bytes);
      checksums[name] = Checksum64::hex(file.checksum());
      file.commit();
    }
  }
  if (what.exp_avg && what.exp_avg_sq && what.state) {
    const auto m = host_copy(*what.exp_avg), v = host_copy(*what.exp_avg_sq);
    std::vector<TensorToWrite> moments = tensors_of(*what.table, m.data(), ".exp_avg");
    for (auto& t : tensors_of(*what.table, v.data(), ".exp_avg_sq")) moments.push_back(t);
    checksums["optimizer.safetensors"] =
        Checksum64::hex(write_safetensors((temp / "optimizer.safetensors").string(), moments));
    const nlohmann::json state = {{"step", what.state->step},
                                  {"tokens_seen", what.state->tokens_seen},
                                  {"optimizer_step", what.optimizer_step},
                                  {"loader", what.state->loader},
                                  {"extra", what.state->extra}};
    write_json(temp / "trainer_state.json", state, checksums);
  }
  write_file_atomically((temp / kChecksums).string(), checksums.dump(2) + "\n");
  fsync_directory(temp.string());
}

}  // namespace

void gather_full_state(Model& model, AdamW& optimizer, ZeroStage1* zero, FlatBuffer& local_m,
                       FlatBuffer& local_v, FlatBuffer& full_weights, FlatBuffer& full_m,
                       FlatBuffer& full_v) {
  model.gather_full(model.weights(), full_weights);
  if (zero) {
    zero->all_gather_range(optimizer.first_moment(), local_m);
    zero->all_gather_range(optimizer.second_moment(), local_v);
    model.gather_full(local_m, full_m);
    model.gather_full(local_v, full_v);
  } else {
    model.gather_full(optimizer.first_moment(), full_m);
    model.gather_full(optimizer.second_moment(), full_v);
  }
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
  const fs::path final_dir = fs::absolute(dir).lexically_normal();
  const fs::path parent = final_dir.parent_path();
  fs::create_directories(parent);
  // Hidden siblings of the final directory, unique to this process: .NAME.tmp.PID, .NAME.old.PID.
  auto sibling = [&](const char* tag) {
    std::string name = ".";
    name += final_dir.filename().string();
    name += tag;
    name += std::to_string(::getpid());
    return parent / name;
  };
  const fs::path temp = sibling(".tmp.");
  fs::remove_all(temp);
  fs::create_directories(temp);
  try {
    write_checkpoint_files(temp, what);
  } catch (...) {  // a full disk: free what the failed save took; the earlier checkpoints stay
    std::error_code ignored;
    fs::remove_all(temp, ignored);
    throw;
  }

  // Swap into place: an existing checkpoint of the same name is moved aside first, then removed.
  const fs::path old = sibling(".old.");
  const bool replace = fs::exists(final_dir);
  if (replace) fs::rename(final_dir, old);
  fs::rename(temp, final_dir);
  fsync_directory(parent.string());
  if (replace) fs::remove_all(old);
}

std::string resolve_checkpoint(const std::string& path) {
  const fs::path p(path);
  if (fs::exists(p / kChecksums) || fs::exists(p / "model.safetensors") ||
      fs::exists(p / "model.safetensors.index.json"))
    return p.string();
  const std::string latest = latest_checkpoint_name(p / "checkpoints");
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

void verify_checkpoint(const std::string& dir) {
  const fs::path d(dir);
  if (!fs::is_directory(d)) throw error("checkpoint: '", dir, "' is not a directory");
  if (is_hf_directory(dir)) return verify_hf_directory(dir);
  if (!fs::exists(d / kChecksums))
    throw error("checkpoint: '", dir, "' has no ", kChecksums,
                " (incomplete or not written by boostlm)");
  const std::string checksums_path = (d / kChecksums).string();
  for (const auto& [file, expected] :
       parse_checksums(read_text_file(checksums_path), checksums_path)) {
    const fs::path path = d / file;
    if (!fs::exists(path)) throw error("checkpoint: '", dir, "' is missing ", file);
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
  const std::string path = (fs::path(dir) / "model.safetensors").string();
  SafetensorsReader reader(path);
  // A named copy: the tensors are read on the host and uploaded.
  HostView<float> weights(model.weights().data(), model.weights().size(), HostAccess::write,
                          "checkpoint load");
  std::vector<float> scratch;
  for (const auto& p : model.params().entries()) {
    if (!reader.has(p.name)) throw error("checkpoint: ", path, " is missing tensor '", p.name, "'");
    read_slice(reader, p.name, p, weights.data() + p.offset, scratch);
  }
  weights.upload();
  for (const auto& [name, entry] : reader.entries())
    if (!model.full_params().find(name))
      throw error("checkpoint: ", path, " has tensor '", name,
                  "' that this model does not (does the config match the checkpoint?)");
}

bool has_training_state(const std::string& dir) {
  return fs::exists(fs::path(dir) / "trainer_state.json") &&
         fs::exists(fs::path(dir) / "optimizer.safetensors");
}

TrainingState read_trainer_state(const std::string& dir) {
  const std::string path = (fs::path(dir) / "trainer_state.json").string();
  TrainingState state;
  parse_trainer_state(read_text_file(path), path, state);
  return state;
}

int64_t load_training_state(const std::string& dir, const ParamTable& table, FlatBuffer& exp_avg,
                            FlatBuffer& exp_avg_sq, TrainingState& state) {
  if (!has_training_state(dir))
    throw error("checkpoint: '", dir, "' holds weights only (no optimizer or trainer state); ",
                "it cannot be resumed, only used to initialise a new run");
  const std::string opt_path = (fs::path(dir) / "optimizer.safetensors").string();
  SafetensorsReader reader(opt_path);
  // A named copy: the moments are read on the host and uploaded.
  HostView<float> m(exp_avg.data(), exp_avg.size(), HostAccess::write, "checkpoint load");
  HostView<float> v(exp_avg_sq.data(), exp_avg_sq.size(), HostAccess::write, "checkpoint load");
  std::vector<float> scratch;
  for (const auto& p : table.entries()) {
    read_slice(reader, p.name + ".exp_avg", p, m.data() + p.offset, scratch);
    read_slice(reader, p.name + ".exp_avg_sq", p, v.data() + p.offset, scratch);
  }
  m.upload();
  v.upload();
  const std::string state_path = (fs::path(dir) / "trainer_state.json").string();
  return parse_trainer_state(read_text_file(state_path), state_path, state);
}

void load_training_state(const std::string& dir, AdamW& optimizer, TrainingState& state) {
  BOOSTLM_ASSERT_MSG(optimizer.whole(), "a ZeRO optimizer loads through the buffer overload");
  optimizer.set_steps_taken(load_training_state(dir, optimizer.table(), optimizer.first_moment(),
                                                optimizer.second_moment(), state));
}

}  // namespace boostlm
