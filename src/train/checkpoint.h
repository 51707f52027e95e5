// Checkpoints: a directory that is either complete or absent (checkpoint/saver.h commits it).
//
//   model.safetensors, or model-rRRRRR.safetensors per rank that wrote weights: fp32 pieces of
//                          the tensors of SPEC §2, under their names
//   optimizer.safetensors, or optimizer-rRRRRR.safetensors: AdamW moments, "<name>.exp_avg" and
//                          "<name>.exp_avg_sq", pieces likewise                (training state)
//   index.json             every tensor's full shape and which file holds which piece of it
//                          (checkpoint/index.h); absent in checkpoints written before sharding,
//                          whose two files hold whole tensors
//   config.json            Hugging Face style (model_type llama for dense, cola for low-rank),
//                          with boostlm's own config under "boostlm"
//   tokenizer.model        the sentencepiece model the data was prepared with (when known), or
//   tokenizer.json         a Hugging Face byte-level BPE (with its tokenizer_config.json, if any)
//   trainer_state.json     step, tokens seen, loader position, RNG, optimizer step (training state)
//   checksums.json         Checksum64 of every other file, written last
//
// Whatever grid wrote it, any grid reads it: each rank reads the pieces of the tensors it holds
// (checkpoint/reader.h), never the whole model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "model/config.h"
#include "model/params.h"
#include "engine/model.h"
#include "checkpoint/checkpoint_json.h"
#include "checkpoint/saver.h"
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

// The small files every checkpoint has beside its tensors (config.json, the tokenizer and, with
// `state`, trainer_state.json), for the rank that commits it.
RootFiles checkpoint_root_files(const ModelConfig& config, const nlohmann::json& config_extra,
                                const std::string& tokenizer_path, const TrainingState* state,
                                int64_t optimizer_step);

// The checkpoint of a model in one process (its tables whole).
CheckpointWrite checkpoint_of(const Model& model, const AdamW* optimizer = nullptr,
                              const TrainingState* state = nullptr, std::string tokenizer = "");

void save_checkpoint(const std::string& dir, const CheckpointWrite& what);

// A Hugging Face LLaMA directory (formats/hf_import.h) is accepted wherever a checkpoint is: it is
// verified, configured and loaded by its own rules.

// A checkpoint directory, or a run directory whose checkpoints/latest names one.
std::string resolve_checkpoint(const std::string& path);

// Checks that the directory is complete and that every file matches checksums.json. With
// `contents` false the tensor files are only checked to exist: a reader checks a file's checksum
// when it first opens it (checkpoint/reader.h), so that a rank of a job reads only its pieces.
void verify_checkpoint(const std::string& dir, bool contents = true);

// The tokenizer a checkpoint's model was trained with: its tokenizer.model or tokenizer.json (whose
// hash checksums.json holds); unknown when it has none (`boostlm init` without --tokenizer, data without one).
TokenizerIdentity checkpoint_tokenizer(const std::string& dir);

// The model configuration stored in config.json (boostlm's own, or converted from HF fields).
ModelConfig read_checkpoint_config(const std::string& dir);

// Loads this rank's slice of every tensor into the model (whatever layout and TP size it was
// saved at); throws Error on a missing, extra or wrongly shaped tensor.
void load_checkpoint_weights(const std::string& dir, Model& model);

// A checkpoint's weights as the converters of formats/ read them: tensor by tensor from its files
// as they ask (a sharded checkpoint's pieces assembled one tensor at a time), so that the whole
// model is never in memory at once; a Hugging Face directory is read whole.
class CheckpointTensors {
 public:
  CheckpointTensors(const std::string& dir, const ModelConfig& config);
  ~CheckpointTensors();
  const ModelTensors& tensors() const { return tensors_; }

 private:
  ModelConfig config_;
  ParamTable table_;
  FlatBuffer whole_;  // a Hugging Face directory's
  std::unique_ptr<class CheckpointReader> reader_;
  ModelTensors tensors_;
};

bool has_training_state(const std::string& dir);
// trainer_state.json alone: step, tokens seen, loader position and the run's saved settings.
TrainingState read_trainer_state(const std::string& dir);
// The optimizer's moments (sliced like the weights) and the trainer's state.
void load_training_state(const std::string& dir, AdamW& optimizer, TrainingState& state);
// The same into moment buffers that hold flat range [begin, end) of a buffer laid out by `table`
// (end < 0: all of it; ZeRO-1: this DP rank's range); returns the optimizer's step count.
int64_t load_training_state(const std::string& dir, const ParamTable& table, FlatBuffer& exp_avg,
                            FlatBuffer& exp_avg_sq, TrainingState& state, int64_t begin = 0,
                            int64_t end = -1);

}  // namespace boostlm
