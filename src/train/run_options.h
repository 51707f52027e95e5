// What a run is configured with and how it is checked, before anything is read or allocated:
// every option's range, the options a --resume really runs with (the checkpoint's saved settings,
// train/run_settings.h, but for the flags given again), the model's configuration, the schedule,
// and the data's shards and tokenizer checked against the model and the batch shape. The loop
// that runs with them is train/trainer.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/loader.h"
#include "model/config.h"
#include "train/schedule.h"
#include "train/trainer.h"

namespace boostlm {

// The options a run really uses and the checkpoint it resumes (verified). On --resume that is the
// checkpoint's saved settings but for the flags given again, each difference reported once.
struct ResolvedOptions {
  TrainOptions options;
  std::string resume_dir;
};

// The options are checked once resolved: a --lr given alone is checked against the saved --min-lr.
ResolvedOptions resolve_options(const TrainOptions& given);

// Every option checked before anything is read or allocated, with the range it may take.
void check_options(const TrainOptions& o);

// The model: the checkpoint's configuration (a --config given with it must match), else --config's
// (with --vocab-size); throws Error when --seq-len exceeds its max_seq_len.
ModelConfig resolve_config(const TrainOptions& o, const std::string& checkpoint);

// The schedule's length is a setting of the run, saved and restored like the others
// (train/run_settings.h): N steps and then M more give the losses of N+M steps in one run
// whenever both parts ran on the same schedule.
LrSchedule resolve_schedule(const TrainOptions& o);

// The data's shards and tokenizer, all checked against the model and the batch shape before the
// first step, so a bad validation shard cannot end a run after hours of training. --data is a
// directory from `boostlm prepare` (its train_NNNNNN.bin shards, or the train.bin of an older
// preparation), that directory's meta.json, or one token shard (no validation).
struct DataFiles {
  std::vector<std::string> train;
  EvalSet val;  // no shards: no validation
  std::string tokenizer;
  bool single_file = false;  // read by DataLoader, as before shards: one file, circular windows
};

DataFiles open_data(std::string dir, const ModelConfig& config, const TrainOptions& o);

// The training batches: a list of shards, memory-mapped, or one token file read whole.
std::unique_ptr<BatchSource> open_loader(const DataFiles& data, const LoaderConfig& config,
                                         int64_t vocab_size);

// Tokens the loader holds in memory: a single file is read whole, shards are mapped.
int64_t loader_resident_tokens(const DataFiles& data);

// A checkpoint's weights about to train on the data's tokens: both must come from one tokenizer
// (first, so that a resume on other data is refused for that, not for its token count).
void check_data_tokenizer(const std::string& checkpoint, const TrainOptions& o);

}  // namespace boostlm
