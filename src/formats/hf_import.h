// Hugging Face LLaMA model directories, as they are published:
//
//   config.json                       model_type "llama" and the fields read_hf_config names
//   model.safetensors                 or sharded: model-0000X-of-0000N.safetensors plus
//   model.safetensors.index.json      {"weight_map": {tensor name: shard file}}
//   tokenizer.model                   sentencepiece, or tokenizer.json (byte-level BPE, with its
//                                     tokenizer_config.json): optional here; generate needs one
//
// Tensors may be F32, BF16 or F16; boostlm holds fp32, and both conversions are exact. The names
// are those of SPEC §2 already. HF's q/k rows are laid out for its rotate-half RoPE, which is the
// convention boostlm's RoPE uses (kernels/rope.h), so they load unpermuted.
//
// Such a directory works wherever a checkpoint does (train --init-from, eval, generate), through
// train/checkpoint.h; `boostlm convert --from-hf` turns it into a boostlm checkpoint.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/param_table.h"
#include "formats/safetensors.h"
#include "model/config.h"

namespace boostlm {

// A directory whose config.json has no boostlm section (boostlm writes one into every checkpoint)
// and which holds model.safetensors or model.safetensors.index.json.
bool is_hf_directory(const std::string& dir);

// The model of config.json; throws Error naming the field for anything boostlm does not implement
// (another model_type, rope_scaling, attention or MLP biases, another activation, a head_dim
// other than hidden_size / num_attention_heads).
ModelConfig read_hf_config(const std::string& dir);
ModelConfig hf_config_to_model(const nlohmann::json& config, const std::string& where);

// The tensors of a directory's weight files, one file or shards, whatever their dtype.
class HfTensors {
 public:
  explicit HfTensors(const std::string& dir);  // throws Error naming a missing or corrupt file
  std::vector<std::string> names() const;
  bool has(const std::string& name) const { return where_.count(name) > 0; }
  const SafetensorsReader::Entry& entry(const std::string& name) const;
  // As fp32; throws Error when the shape is not `shape` or the dtype is not F32, BF16 or F16.
  void read(const std::string& name, const std::vector<int64_t>& shape, float* out) const;
  // The dtype most tensors are stored in ("F32", "BF16", "F16").
  std::string main_dtype() const;

 private:
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
  std::map<std::string, const SafetensorsReader*> where_;
};

// Checks config.json and that every weight file opens (train/checkpoint.h's verify_checkpoint).
void verify_hf_directory(const std::string& dir);

// Keeps this rank's slice of a full tensor (parallel/sharding.h's slice_tensor), for a table of
// shards.
using SliceTensor = void (*)(const ParamInfo& info, const float* full, float* local);

// Fills `weights` (laid out by `table`: full tensors, or this rank's shards sliced by `slice`)
// from the directory; throws Error on a missing, wrongly shaped or unexpected tensor (biases
// named as such).
void load_hf_weights(const std::string& dir, const ParamTable& table, FlatBuffer& weights,
                     SliceTensor slice = nullptr);

// A directory's model whole, in fp32, with what `convert --from-hf` keeps of it: its tokenizer
// file (tokenizer.model, else tokenizer.json; empty: none) and the torch dtype of most of its
// tensors, which the checkpoint keeps (config.json's "hf_torch_dtype") so an export writes it back.
struct HfModel {
  ModelConfig config;
  ParamTable table;
  FlatBuffer weights;
  std::string tokenizer;
  std::string torch_dtype;
};
HfModel read_hf_model(const std::string& dir);

}  // namespace boostlm
