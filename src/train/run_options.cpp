#include "train/run_options.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "train/checkpoint.h"
#include "train/run_dir.h"
#include "train/run_settings.h"

namespace boostlm {

namespace fs = std::filesystem;

namespace {

// The fields in which two configs differ, each as "d_model 64 (checkpoint) vs 128 (--config x)";
// "" when they are the same.
std::string config_differences(const ModelConfig& checkpoint, const ModelConfig& given,
                               const std::string& given_source) {
  const nlohmann::json a = checkpoint.to_json(), b = given.to_json();
  std::vector<std::string> fields;
  for (auto it = a.begin(); it != a.end(); ++it) fields.push_back(it.key());
  for (auto it = b.begin(); it != b.end(); ++it)
    if (!a.contains(it.key())) fields.push_back(it.key());
  std::string out;
  for (const std::string& field : fields) {
    const std::string left = a.contains(field) ? a.at(field).dump() : "(none)";
    const std::string right = b.contains(field) ? b.at(field).dump() : "(none)";
    if (left == right) continue;
    out += (out.empty() ? "" : ", ") + field + " " + left + " (checkpoint) vs " + right + " (" +
           given_source + ")";
  }
  return out;
}

void check_range(bool ok, const char* option, double value, const char* allowed) {
  if (!ok) throw error(option, " ", value, " is out of range: ", allowed);
}

}  // namespace

namespace {

// --lax-gate and --lax-latent-act on a config (its fields lax_gate, lax_latent_act).
void apply_lax_options(const TrainOptions& o, ModelConfig& config) {
  if (o.lax_gate.empty() && o.lax_latent_act.empty()) return;
  if (config.arch != Arch::lax)
    throw error("--lax-gate and --lax-latent-act are for arch lax; the model is ",
                to_string(config.arch));
  if (!o.lax_gate.empty()) config.lax_gate = parse_lax_gate(o.lax_gate);
  if (!o.lax_latent_act.empty()) config.lax_latent_act = o.lax_latent_act == "on";
}

}  // namespace

ModelConfig resolve_config(const TrainOptions& o, const std::string& checkpoint) {
  ModelConfig config;
  if (!checkpoint.empty()) {
    config = read_checkpoint_config(checkpoint);
    // The checkpoint's model is the model: a different gate would be another parameter table.
    ModelConfig asked = config;
    apply_lax_options(o, asked);
    if (asked.to_json() != config.to_json())
      throw error("--lax-gate/--lax-latent-act differ from the checkpoint ", checkpoint,
                  "'s model (lax_gate ", to_string(config.lax_gate), ", lax_latent_act ",
                  config.lax_latent_act ? "true" : "false", "); omit them");
    if (!o.config_path.empty()) {
      ModelConfig given = ModelConfig::load(o.config_path);
      if (o.vocab_size > 0) given.vocab_size = o.vocab_size;
      apply_lax_options(o, given);
      const std::string source = "--config " + o.config_path;
      const std::string differences = config_differences(config, given, source);
      if (!differences.empty())
        throw error("config: ", differences, ": ", source, " does not match the checkpoint ",
                    checkpoint, " (omit --config to use the checkpoint's)");
    }
  } else {
    if (o.config_path.empty()) throw error("--config is required (a preset under configs/)");
    config = ModelConfig::load(o.config_path);
    if (o.vocab_size > 0) config.vocab_size = o.vocab_size;
    apply_lax_options(o, config);
    config.validate();
  }
  if (o.seq_len > config.max_seq_len)
    throw error("--seq-len ", o.seq_len, " exceeds the model's max_seq_len=", config.max_seq_len);
  return config;
}

DataFiles open_data(std::string dir, const ModelConfig& config, const TrainOptions& o) {
  DataFiles f;
  if (fs::is_regular_file(dir) && fs::path(dir).filename() == "meta.json")
    dir = fs::path(dir).parent_path().string();
  if (fs::is_regular_file(dir)) {
    f.train = {dir};
    f.single_file = true;
    return f;
  }
  f.train = prepared_shards(dir, "train");
  if (f.train.empty())
    throw error("--data ", dir, " has no train shards (train_000000.bin, ... or train.bin; run ",
                "`boostlm prepare` first)");
  f.single_file = f.train.size() == 1 && fs::path(f.train[0]).filename() == "train.bin";
  const std::string tok = prepared_tokenizer_file(dir);
  if (!tok.empty()) {  // first: a vocabulary mismatch explains bad tokens in the shards
    f.tokenizer = tok;
    const int64_t vocab = Tokenizer::load(f.tokenizer).vocab_size();
    if (vocab > config.vocab_size)
      throw error("the tokenizer ", f.tokenizer, " has ", vocab,
                  " tokens but the model's vocab_size is ", config.vocab_size,
                  " (use a preset with a larger vocabulary or --vocab-size ", vocab, ")");
  } else {
    warn("--data " + dir +
         " has no tokenizer.model or tokenizer.json: checkpoints will carry no tokenizer, so " +
         "generate will need --tokenizer");
  }
  // Validation scores the first --eval-batches windows of all the val shards, in order (warning
  // when they hold fewer); their tokens are checked here, before the first step.
  const std::vector<std::string> val = prepared_shards(dir, "val");
  if (!val.empty())
    f.val = select_eval_windows(val, o.batch_size, o.seq_len, o.eval_batches, config.vocab_size);
  return f;
}

std::unique_ptr<BatchSource> open_loader(const DataFiles& data, const LoaderConfig& config,
                                         int64_t vocab_size) {
  if (!data.single_file) return std::make_unique<ShardLoader>(data.train, config, vocab_size);
  std::vector<int32_t> tokens = read_shard(data.train[0]);
  check_tokens_below(tokens, vocab_size, data.train[0]);
  return std::make_unique<DataLoader>(std::move(tokens), config, data.train[0]);
}

int64_t loader_resident_tokens(const DataFiles& data) {
  return data.single_file ? read_shard_header(data.train[0]).num_tokens : 0;
}

void check_data_tokenizer(const std::string& checkpoint, const TrainOptions& o) {
  const TokenizerIdentity data = prepared_tokenizer(o.data_dir);  // also checks meta.json agrees
  if (checkpoint.empty()) return;
  const std::string action = (o.resume.empty() ? "--init-from " : "--resume ") + checkpoint;
  const std::string warning = check_same_tokenizer(checkpoint_tokenizer(checkpoint), data,
                                                   o.allow_tokenizer_change, action);
  if (!warning.empty()) warn(warning + "; this run's checkpoints carry the data's tokenizer");
}

void check_options(const TrainOptions& o) {
  check_range(o.batch_size > 0, "--batch-size", o.batch_size, "at least 1");
  check_range(o.seq_len > 0, "--seq-len", o.seq_len, "at least 1");
  check_range(o.steps > 0, "--steps", o.steps, "at least 1");
  check_range(o.grad_accum > 0, "--grad-accum", o.grad_accum, "at least 1");
  check_range(o.schedule_steps >= 0, "--schedule-steps", o.schedule_steps,
              "at least 1 (0: the run's --steps)");
  check_range(o.eval_interval >= 0, "--eval-interval", o.eval_interval, "0 (end only) or more");
  check_range(o.eval_batches > 0, "--eval-batches", o.eval_batches, "at least 1");
  check_range(o.save_interval >= 0, "--save-interval", o.save_interval, "0 (end only) or more");
  check_range(o.keep_checkpoints > 0, "--keep", o.keep_checkpoints, "at least 1");
  check_range(o.log_interval > 0, "--log-interval", o.log_interval, "at least 1");
  check_range(std::isfinite(o.save_timeout_s) && o.save_timeout_s >= 0, "--save-timeout",
              o.save_timeout_s, "0 (no bound) or a number of seconds");
  check_range(o.bucket_mb > 0, "--bucket-mb", o.bucket_mb, "at least 1");
  const OptimizerConfig& a = o.optimizer;
  check_range(a.beta1 >= 0 && a.beta1 < 1, "--beta1", a.beta1, "[0, 1)");
  check_range(a.beta2 >= 0 && a.beta2 < 1, "--beta2", a.beta2, "[0, 1)");
  check_range(std::isfinite(a.eps) && a.eps > 0, "--adam-eps", a.eps, "a positive number");
  check_range(std::isfinite(a.weight_decay) && a.weight_decay >= 0, "--weight-decay",
              a.weight_decay, "0 or a positive number");
  check_range(std::isfinite(a.grad_clip) && a.grad_clip >= 0, "--grad-clip", a.grad_clip,
              "0 (off) or a positive number");
  if (!o.resume.empty() && !o.init_from.empty())
    throw error("--resume and --init-from are exclusive");
  LrSchedule schedule = o.schedule;
  schedule.total_steps = o.steps;
  schedule.validate();
}

LrSchedule resolve_schedule(const TrainOptions& o) {
  LrSchedule schedule = o.schedule;
  schedule.total_steps = o.schedule_steps > 0 ? o.schedule_steps : o.steps;
  schedule.validate();
  return schedule;
}

namespace {

// The checkpoint --resume names, verified. A corrupt one is refused, naming the newest intact
// checkpoint before it and the command that resumes from that; where --resume named the run
// directory (its newest checkpoint, not one the user chose), the resume falls back to that one,
// with a warning.
std::string verified_resume(const std::string& given, const std::string& dir) {
  try {
    verify_checkpoint(dir);
    return dir;
  } catch (const Error& e) {
    const fs::path checkpoints = fs::path(dir).parent_path();
    const std::string name = fs::path(dir).filename().string();
    int64_t step = -1;
    const auto all = list_checkpoints(checkpoints);
    for (const CheckpointEntry& c : all)
      if (c.dir.filename() == name) step = c.step;
    std::string intact;
    for (auto it = all.rbegin(); it != all.rend() && step >= 0 && intact.empty(); ++it) {
      if (it->step >= step) continue;
      try {
        verify_checkpoint(it->dir.string());
        intact = it->dir.string();
      } catch (const Error&) {
      }
    }
    const bool run_directory =
        fs::path(given).lexically_normal() != fs::path(dir).lexically_normal();
    if (run_directory && !intact.empty()) {
      warn(std::string(e.what()) + "; resuming from the newest intact checkpoint before it, " +
           intact);
      return intact;
    }
    if (intact.empty()) throw;
    throw error(e.what(), ". The newest intact checkpoint before it is ", intact,
                ": resume from it with --resume ", intact);
  }
}

}  // namespace

ResolvedOptions resolve_options(const TrainOptions& given) {
  ResolvedOptions r{given, ""};
  if (given.resume.empty() || !given.init_from.empty()) {
    check_options(given);
    return r;
  }
  r.resume_dir = verified_resume(given.resume, resolve_checkpoint(given.resume));
  if (has_training_state(r.resume_dir)) {  // else refused, saying why, when it is loaded
    const std::vector<std::string> changes = restore_run_settings(
        r.options, read_trainer_state(r.resume_dir), mpi_world_size(), r.resume_dir);
    if (mpi_world_rank() == 0)
      for (const std::string& line : changes)
        std::fprintf(stderr, "boostlm train: %s\n", line.c_str());
  }
  check_options(r.options);
  return r;
}

}  // namespace boostlm
