// Checkpoints: a directory that is either complete or absent.
//
//   model.safetensors      full tensors with the names and shapes of SPEC §2 (fp32)
//   config.json            Hugging Face style (model_type llama for dense, cola for low-rank),
//                          with boostlm's own config under "boostlm"
//   tokenizer.model        the sentencepiece model the data was prepared with (when known), or
//   tokenizer.json         a Hugging Face byte-level BPE (with its tokenizer_config.json, if any)
//   optimizer.safetensors  AdamW moments: "<name>.exp_avg", "<name>.exp_avg_sq"   (training state)
//   trainer_state.json     step, tokens seen, loader position, RNG, optimizer step (training state)
//   checksums.json         Checksum64 of every other file, written last
//
// The directory is assembled under a temporary name, every file fsynced, then renamed into place,
// so a crash never leaves a half checkpoint that looks whole; loading verifies every checksum.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "model/config.h"
#include "engine/model.h"
#include "engine/data_parallel.h"
#include "train/checkpoint_json.h"
#include "train/optimizer.h"

namespace boostlm {

// What a checkpoint holds, as full (unsharded) tensors laid out by `table` (SPEC §2).
struct CheckpointWrite {
  const ModelConfig* config = nullptr;
  const ParamTable* table = nullptr;
  const FlatBuffer* weights = nullptr;
  // Optional, all together: AdamW moments and the trainer's state make the checkpoint resumable.
  const FlatBuffer* exp_avg = nullptr;
  const FlatBuffer* exp_avg_sq = nullptr;
  int64_t optimizer_step = 0;
  const TrainingState* state = nullptr;
  std::string tokenizer_path;   // optional: copied in as tokenizer.model or tokenizer.json
  nlohmann::json config_extra;  // optional: more fields for config.json (e.g. hf_torch_dtype)
};

// The checkpoint of a model that holds its tensors whole (one process, no TP).
// A sharded run's weights and AdamW moments as full tensors, for its checkpoint: under ZeRO-1
// the DP ranks' owned ranges first (into local_m/local_v: every element of this rank's shards),
// then the TP shards. Every rank of the job calls it (collectives); the full_* buffers hold
// model.full_params().total_elements() elements.
void gather_full_state(Model& model, AdamW& optimizer, ZeroStage1* zero, FlatBuffer& local_m,
                       FlatBuffer& local_v, FlatBuffer& full_weights, FlatBuffer& full_m,
                       FlatBuffer& full_v);

CheckpointWrite checkpoint_of(const Model& model, const AdamW* optimizer = nullptr,
                              const TrainingState* state = nullptr, std::string tokenizer = "");

void save_checkpoint(const std::string& dir, const CheckpointWrite& what);

// A Hugging Face LLaMA directory (formats/hf_import.h) is accepted wherever a checkpoint is: it is
// verified, configured and loaded by its own rules.

// A checkpoint directory, or a run directory whose checkpoints/latest names one.
std::string resolve_checkpoint(const std::string& path);

// Checks that the directory is complete and that every file matches checksums.json.
void verify_checkpoint(const std::string& dir);

// The tokenizer a checkpoint's model was trained with: its tokenizer.model or tokenizer.json (whose
// hash checksums.json holds); unknown when it has none (`boostlm init` without --tokenizer, data without one).
TokenizerIdentity checkpoint_tokenizer(const std::string& dir);

// The model configuration stored in config.json (boostlm's own, or converted from HF fields).
ModelConfig read_checkpoint_config(const std::string& dir);

// Loads this rank's slice of every tensor into the model (whatever layout and TP size it was
// saved at); throws Error on a missing, extra or wrongly shaped tensor.
void load_checkpoint_weights(const std::string& dir, Model& model);

bool has_training_state(const std::string& dir);
// trainer_state.json alone: step, tokens seen, loader position and the run's saved settings.
TrainingState read_trainer_state(const std::string& dir);
// The optimizer's moments (sliced like the weights) and the trainer's state.
void load_training_state(const std::string& dir, AdamW& optimizer, TrainingState& state);
// The same into moment buffers laid out by `table` (this rank's shards, every element), for an
// optimizer that owns only part of them (ZeRO); returns the optimizer's step count.
int64_t load_training_state(const std::string& dir, const ParamTable& table, FlatBuffer& exp_avg,
                            FlatBuffer& exp_avg_sq, TrainingState& state);

}  // namespace boostlm
