#include "formats/hf_import.h"

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "core/file_io.h"
#include "data/tokenizer.h"
#include "model/params.h"

namespace boostlm {

namespace fs = std::filesystem;

namespace {

constexpr const char* kIndex = "model.safetensors.index.json";
constexpr const char* kSingle = "model.safetensors";

nlohmann::json read_json(const std::string& path) {
  try {
    return nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw error(path, " is not valid JSON: ", e.what());
  }
}

// A field boostlm cannot honour: refused by name rather than silently ignored, since the model
// would load and then compute something other than what its authors trained.
void refuse_if(bool unsupported, const std::string& where, const std::string& field,
               const std::string& why) {
  if (unsupported) throw error(where, ": ", field, " is not supported: ", why);
}

// Whether a JSON value is set to something other than null/false/0.
bool is_set(const nlohmann::json& j, const char* field) {
  if (!j.contains(field) || j[field].is_null()) return false;
  if (j[field].is_boolean()) return j[field].get<bool>();
  return true;
}

std::string torch_dtype_of(const std::string& safetensors_dtype) {
  if (safetensors_dtype == "BF16") return "bfloat16";
  if (safetensors_dtype == "F16") return "float16";
  return "float32";
}

// Tensors HF checkpoints may carry that are not parameters: the RoPE frequencies some older
// conversions saved (boostlm computes them from rope_theta).
bool is_buffer(const std::string& name) {
  return name.size() > 21 && name.compare(name.size() - 21, 21, "rotary_emb.inv_freq") == 0;
}

}  // namespace

bool is_hf_directory(const std::string& dir) {
  const fs::path d(dir);
  if (!fs::exists(d / "config.json")) return false;
  if (!fs::exists(d / kSingle) && !fs::exists(d / kIndex)) return false;
  if (fs::exists(d / "checksums.json")) return false;  // a boostlm checkpoint
  try {
    return !nlohmann::json::parse(read_text_file((d / "config.json").string())).contains("boostlm");
  } catch (const std::exception&) {
    return true;  // read_hf_config names the problem
  }
}

namespace {

// The low-rank part of a boostlm export's config.json (hf_export.h): its "cola" section says the
// architecture (latent_activation silu: cola, identity: svd), the MLP gate's activation and every
// projection family's rank.
void read_low_rank_section(const nlohmann::json& j, const std::string& where, nlohmann::json& c,
                           const std::string& section) {
  refuse_if(!j.contains(section) || !j[section].is_object(), where,
            "model_type \"" + section + "\"",
            "a low-rank model needs the \"" + section + "\" section boostlm's export writes");
  const nlohmann::json& lr = j[section];
  const std::string latent = lr.value("latent_activation", std::string("(missing)"));
  refuse_if(latent != "silu" && latent != "identity", where,
            section + ".latent_activation \"" + latent + "\"",
            "expected silu (CoLA, LaX) or identity (svd, LaX without σ)");
  if (section == "lax") {  // LaX: its gate, and σ or not
    c["arch"] = "lax";
    c["lax_latent_act"] = latent == "silu";
    c["lax_gate"] = lr.value("gate", std::string("kron"));
  } else {
    c["arch"] = latent == "silu" ? "cola" : "svd";
  }
  const std::string gate = lr.value("mlp_gate_activation", std::string("silu"));
  refuse_if(gate != "silu" && gate != "identity", where,
            section + ".mlp_gate_activation \"" + gate + "\"", "expected silu or identity");
  c["mlp_gate_act"] = gate == "silu";
  const nlohmann::json& ranks = lr.at("ranks");
  for (ProjKind kind : kProjKinds)
    c[std::string(to_string(kind)) + "_rank"] = ranks.at(to_string(kind));
}

}  // namespace

ModelConfig hf_config_to_model(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw error(where, ": not a JSON object");
  const std::string type = j.value("model_type", std::string("(missing)"));
  refuse_if(type != "llama" && type != "cola" && type != "lax", where,
            "model_type \"" + type + "\"",
            "boostlm imports LLaMA models (model_type \"llama\") and its own low-rank exports "
            "(\"cola\", \"lax\")");
  refuse_if(is_set(j, "rope_scaling"), where, "rope_scaling",
            "boostlm implements plain RoPE (remove it only if the model was trained without it)");
  refuse_if(is_set(j, "attention_bias"), where, "attention_bias",
            "boostlm's projections have no bias");
  refuse_if(is_set(j, "mlp_bias"), where, "mlp_bias", "boostlm's projections have no bias");
  const std::string act = j.value("hidden_act", std::string("silu"));
  refuse_if(act != "silu", where, "hidden_act \"" + act + "\"", "boostlm's MLP uses SiLU");
  try {
    // ModelConfig::from_json checks every number's type and range (hidden_size a multiple of
    // num_attention_heads among them); head_dim, which boostlm derives, is compared with it after.
    const nlohmann::json& heads = j.at("num_attention_heads");
    nlohmann::json c = {{"arch", "dense"},
                        {"vocab_size", j.at("vocab_size")},
                        {"d_model", j.at("hidden_size")},
                        {"n_layers", j.at("num_hidden_layers")},
                        {"n_heads", heads},
                        {"n_kv_heads", j.value("num_key_value_heads", heads)},
                        {"d_ff", j.at("intermediate_size")},
                        {"rms_eps", j.value("rms_norm_eps", 1e-6)},
                        {"rope_theta", j.value("rope_theta", 10000.0)},
                        {"max_seq_len", j.value("max_position_embeddings", 2048)},
                        {"tied_embeddings", j.value("tie_word_embeddings", false)},
                        {"mlp_gate_act", true}};
    if (type == "cola" || type == "lax") read_low_rank_section(j, where, c, type);
    ModelConfig config = ModelConfig::from_json(c);
    if (config.low_rank()) config.set_ranks(config.ranks());  // shorthands where ranks agree
    refuse_if(is_set(j, "head_dim") && j.at("head_dim") != config.head_dim(), where, "head_dim",
              "boostlm's head dimension is hidden_size / num_attention_heads");
    return config;
  } catch (const nlohmann::json::exception& e) {
    throw error(where, ": a required field is missing or has the wrong type: ", e.what());
  } catch (const Error& e) {
    throw error(where, ": ", e.what());
  }
}

ModelConfig read_hf_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  return hf_config_to_model(read_json(path), path);
}

HfTensors::HfTensors(const std::string& dir) {
  const fs::path d(dir);
  if (fs::exists(d / kIndex)) {
    const std::string index_path = (d / kIndex).string();
    const nlohmann::json index = read_json(index_path);
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      throw error(index_path, ": has no \"weight_map\" object");
    std::map<std::string, const SafetensorsReader*> by_file;
    for (const auto& [name, file_json] : index["weight_map"].items()) {
      if (!file_json.is_string())
        throw error(index_path, ": weight_map[\"", name, "\"] is not a file name");
      const std::string file = file_json.get<std::string>();
      // Shards are files of this directory: no paths that would read elsewhere.
      if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
        throw error(index_path, ": weight_map names '", file, "', not a file in ", dir);
      if (!by_file.count(file)) {
        const fs::path shard = d / file;
        if (!fs::exists(shard))
          throw error(index_path, " names shard ", file, ", which is missing from ", dir);
        files_.push_back(std::make_unique<SafetensorsReader>(shard.string()));
        by_file[file] = files_.back().get();
      }
      const SafetensorsReader* reader = by_file[file];
      if (!reader->has(name))
        throw error(index_path, " places tensor '", name, "' in ", file, ", which lacks it");
      where_[name] = reader;
    }
    // A shard's tensors that the index does not list would be ignored by HF too; boostlm refuses
    // them, as they mean the index and the shards disagree.
    for (const auto& reader : files_)
      for (const auto& [name, entry] : reader->entries())
        if (!where_.count(name) || where_[name] != reader.get())
          throw error(index_path, " does not list tensor '", name, "' of a shard");
  } else {
    files_.push_back(std::make_unique<SafetensorsReader>((d / kSingle).string()));
    for (const auto& [name, entry] : files_.back()->entries()) where_[name] = files_.back().get();
  }
}

std::vector<std::string> HfTensors::names() const {
  std::vector<std::string> out;
  for (const auto& [name, reader] : where_) out.push_back(name);
  return out;
}

const SafetensorsReader::Entry& HfTensors::entry(const std::string& name) const {
  return where_.at(name)->entries().at(name);
}

void HfTensors::read(const std::string& name, const std::vector<int64_t>& shape, float* out) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw error("the model's weight files lack tensor '", name, "'");
  const SafetensorsReader& reader = *it->second;
  const auto& e = entry(name);
  if (e.shape != shape)
    throw error("tensor '", name, "' has shape ", shape_string(e.shape), ", the config implies ",
                shape_string(shape));
  reader.read(name, shape, out);  // F32, BF16 or F16, checked for non-finite values
}

std::string HfTensors::main_dtype() const {
  std::map<std::string, size_t> bytes;
  for (const auto& [name, reader] : where_) {
    const auto& e = reader->entries().at(name);
    bytes[e.dtype] += e.end - e.begin;
  }
  std::string best = "F32";
  size_t most = 0;
  for (const auto& [dtype, n] : bytes)
    if (n > most) most = n, best = dtype;
  return best;
}

void verify_hf_directory(const std::string& dir) {
  read_hf_config(dir);
  HfTensors tensors(dir);
}

void load_hf_weights(const std::string& dir, const ParamTable& table, FlatBuffer& weights,
                     SliceTensor slice) {
  const ModelConfig config = read_hf_config(dir);
  const HfTensors tensors(dir);
  const ParamTable full = build_param_table(config);
  for (const auto& name : tensors.names()) {
    if (full.find(name) || is_buffer(name)) continue;
    // HF may store the head of a tied model; it is the embedding, which is what boostlm reads.
    if (name == "lm_head.weight" && config.tied_embeddings) continue;
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0)
      throw error(dir, ": tensor '", name, "' is a bias; boostlm's LLaMA has none");
    throw error(dir, ": tensor '", name, "' is not a LLaMA parameter boostlm knows (SPEC §2)");
  }
  // A named copy: the tensors are read on the host and uploaded.
  HostView<float> host(weights.data(), weights.size(), HostAccess::write, "Hugging Face load");
  std::vector<float> scratch;
  for (const auto& p : table.entries()) {
    if (p.shard_axis < 0) {
      tensors.read(p.name, p.shape, host.data() + p.offset);
      continue;
    }
    BOOSTLM_ASSERT_MSG(slice, "a table of shards needs a slice function");
    scratch.resize(p.full_numel());
    tensors.read(p.name, p.shape, scratch.data());
    slice(p, scratch.data(), host.data() + p.offset);
  }
  host.upload();
}

HfModel read_hf_model(const std::string& dir) {
  HfModel model;
  model.config = read_hf_config(dir);
  model.table = build_param_table(model.config);
  model.weights = FlatBuffer(model.table.total_elements());
  load_hf_weights(dir, model.table, model.weights);
  model.tokenizer = find_tokenizer(dir);  // tokenizer.model, else tokenizer.json, else none
  model.torch_dtype = torch_dtype_of(HfTensors(dir).main_dtype());
  return model;
}

}  // namespace boostlm
