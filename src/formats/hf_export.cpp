#include "formats/hf_export.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "core/file_io.h"
#include "data/tokenizer.h"
#include "formats/safetensors.h"

namespace boostlm {

namespace fs = std::filesystem;

namespace {

struct DtypeInfo {
  std::string torch, safetensors;
};

DtypeInfo resolve_dtype(const std::string& requested, const std::string& imported) {
  std::string torch = requested;
  if (torch == "auto") torch = imported;
  if (torch == "float32" || torch == "fp32") return {"float32", "F32"};
  if (torch == "bfloat16" || torch == "bf16") return {"bfloat16", "BF16"};
  if (torch == "float16" || torch == "fp16") return {"float16", "F16"};
  throw error("--dtype ", requested, ": expected auto, float32, bfloat16 or float16");
}

// The tensor's values in the export dtype, as bytes.
std::vector<unsigned char> encode(const float* values, int64_t n, const std::string& dtype) {
  std::vector<unsigned char> out(n * safetensors_element_bytes(dtype));
  if (dtype == "F32") {
    std::memcpy(out.data(), values, out.size());
    return out;
  }
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t v = dtype == "BF16" ? float_to_bf16(values[i]) : float_to_half(values[i]);
    std::memcpy(out.data() + 2 * i, &v, 2);
  }
  return out;
}

nlohmann::json export_config(const ModelConfig& c, const std::string& torch_dtype,
                             const std::string& tokenizer) {
  // The fields boostlm's checkpoints carry too (hf_config), less boostlm's own
  // section (an exported directory is read as a Hugging Face one), plus what HF's loader expects.
  nlohmann::json j = hf_config(c);
  j.erase("boostlm");
  j["rope_scaling"] = nullptr;
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["torch_dtype"] = torch_dtype;
  if (!tokenizer.empty()) {
    const Tokenizer tok = Tokenizer::load(tokenizer);
    if (tok.bos_id() >= 0) j["bos_token_id"] = tok.bos_id();
    if (tok.eos_id() >= 0) j["eos_token_id"] = tok.eos_id();
  }
  if (c.low_rank()) {
    // How to read the factors without boostlm (README, "Bring your own model"); hf_config's
    // architectures name the class of modeling_boostlm.py that does.
    nlohmann::json ranks = nlohmann::json::object();
    for (ProjKind kind : kProjKinds) ranks[to_string(kind)] = c.rank(kind);
    const char* latent = c.latent_act() ? "silu" : "identity";
    const char* gate = c.mlp_gate_act ? "silu" : "identity";
    if (c.arch != Arch::lax) {
      j["cola"] = {{"ranks", ranks},
                   {"latent_activation", latent},
                   {"mlp_gate_activation", gate},
                   {"projection", "y = latent_activation(x @ cola_a) @ cola_b"},
                   {"cola_a_shape", "[in_features, rank]"},
                   {"cola_b_shape", "[rank, out_features]"}};
    } else {
      // LaX (model/lax.h): its own section, the crossing spelled out.
      nlohmann::json factors = nlohmann::json::object();
      for (ProjKind kind : kProjKinds) {
        const auto [p, q] = kron_factors(c.rank(kind));
        factors[to_string(kind)] = {p, q};
      }
      const bool kron = c.lax_gate == LaxGate::kron;
      j["lax"] = {
          {"ranks", ranks},
          {"latent_activation", latent},
          {"mlp_gate_activation", gate},
          {"gate", to_string(c.lax_gate)},
          {"norm", "layer_norm"},
          {"norm_eps", 1e-6},
          {"projection",
           "block 0: h = latent_activation(x @ cola_a); block l >= 1: h = "
           "latent_activation(lax_norm(x @ cola_a + lax_gate(h_prev))); y = h @ cola_b; h_prev: "
           "the same projection's h in block l - 1"},
          {"lax_gate",
           kron ? "h viewed as H [p, q] (row-major) -> einsum('...ab,ai,bj->...ij', H, kron_p, "
                  "kron_q)"
                : "h @ weight"},
          {"lax_gate_shapes", kron ? nlohmann::json{{"kron_p", "[p, p]"}, {"kron_q", "[q, q]"}}
                                   : nlohmann::json{{"weight", "[rank, rank] (in, out)"}}},
          {"kron_factors", factors},
          {"lax_norm_shapes", {{"weight", "[rank]"}, {"bias", "[rank]"}}},
          {"cola_a_shape", "[in_features, rank]"},
          {"cola_b_shape", "[rank, out_features]"}};
    }
  }
  return j;
}

void write_weights(const fs::path& dir, const ModelTensors& model, const DtypeInfo& dtype,
                   int64_t shard_bytes) {
  // Tensors in order, grouped into shards of at most shard_bytes (a larger tensor alone), planned
  // from their sizes first; then each shard is read, encoded and written in turn, so no more than
  // one shard's tensors are in memory (a checkpoint read tensor by tensor stays on disk).
  const size_t element_bytes = safetensors_element_bytes(dtype.safetensors);
  std::vector<std::vector<const ParamInfo*>> shards(1);
  int64_t in_shard = 0, total = 0;
  for (const auto& p : model.table->entries()) {
    const auto bytes = p.numel * static_cast<int64_t>(element_bytes);
    if (in_shard > 0 && in_shard + bytes > shard_bytes) shards.emplace_back(), in_shard = 0;
    shards.back().push_back(&p);
    in_shard += bytes;
    total += bytes;
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    std::vector<std::vector<unsigned char>> storage;
    std::vector<RawTensorToWrite> tensors;
    storage.reserve(shards[s].size());
    for (const ParamInfo* p : shards[s]) {
      const std::vector<float> values = model.tensor(p->name);
      storage.push_back(encode(values.data(), p->numel, dtype.safetensors));
      tensors.push_back({p->name, dtype.safetensors, p->shape, storage.back().data()});
    }
    char name[64];
    if (shards.size() == 1)
      std::snprintf(name, sizeof name, "model.safetensors");
    else
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    write_safetensors_raw((dir / name).string(), tensors, metadata);
    for (const auto& t : tensors) weight_map[t.name] = name;
  }
  if (shards.size() == 1) return;
  const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_file_atomically((dir / "model.safetensors.index.json").string(), index.dump(2) + "\n");
}

}  // namespace

nlohmann::json hf_config(const ModelConfig& c) {
  const char* type = c.arch == Arch::lax ? "lax" : c.low_rank() ? "cola" : "llama";
  nlohmann::json j = {{"model_type", type},
                      {"architectures", {c.low_rank() ? "BoostlmForCausalLM" : "LlamaForCausalLM"}},
                      {"hidden_size", c.d_model},
                      {"intermediate_size", c.d_ff},
                      {"num_attention_heads", c.n_heads},
                      {"num_key_value_heads", c.n_kv_heads},
                      {"num_hidden_layers", c.n_layers},
                      {"vocab_size", c.vocab_size},
                      {"rms_norm_eps", float_as_decimal(c.rms_eps)},
                      {"rope_theta", float_as_decimal(c.rope_theta)},
                      {"max_position_embeddings", c.max_seq_len},
                      {"tie_word_embeddings", c.tied_embeddings},
                      {"hidden_act", "silu"},
                      {"torch_dtype", "float32"},
                      {"boostlm", c.to_json()}};
  if (c.low_rank()) {
    // The ranks as boostlm's config writes them: the shorthands where a kind's families agree,
    // else each family's (q_rank ... down_rank).
    const nlohmann::json own = c.to_json();
    for (const auto& [field, value] : own.items())
      if (field.ends_with("_rank")) j[field] = value;
    j["lr_act"] = c.latent_act();  // CoLA (and LaX unless ablated): SiLU between the factors
    j["mlp_gate_act"] = c.mlp_gate_act;
  }
  return j;
}

void check_hf_exportable(const ModelConfig& config, const HfExportOptions& options) {
  if (options.shard_bytes <= 0) throw error("--shard-size must be positive");
  if (!config.low_rank() && !config.mlp_gate_act)
    throw error("convert --to-hf: the checkpoint's MLP has no SiLU on the gate (mlp_gate_act ",
                "false), which LLaMA has; it cannot be written as a LlamaForCausalLM");
}

std::string export_to_hf(const ModelTensors& model, const std::string& tokenizer,
                         const std::string& imported_dtype, const std::string& out,
                         const HfExportOptions& options) {
  check_hf_exportable(*model.config, options);
  const ModelConfig& config = *model.config;
  const DtypeInfo dtype = resolve_dtype(options.dtype, imported_dtype);

  const fs::path final_dir = fs::absolute(out).lexically_normal();
  if (fs::exists(final_dir) && !(fs::is_directory(final_dir) && fs::is_empty(final_dir)))
    throw error("convert --to-hf: ", out, " exists and is not an empty directory");
  // Assembled beside the destination and renamed into place: never a half-written model.
  std::string temp_name = ".";  // built by += : GCC 12 warns (falsely) on "." + std::string
  temp_name += final_dir.filename().string();
  temp_name += ".tmp." + std::to_string(getpid());
  const fs::path temp = final_dir.parent_path() / temp_name;
  fs::remove_all(temp);
  fs::create_directories(temp);
  try {
    const std::string& tok = tokenizer;
    write_weights(temp, model, dtype, options.shard_bytes);
    write_file_atomically((temp / "config.json").string(),
                          export_config(config, dtype.torch, tok).dump(2) + "\n");
    if (!tok.empty()) {
      const std::string name = tokenizer_file_name(tok);
      write_file_atomically((temp / name).string(), read_text_file(tok));
      const fs::path config = fs::path(tok).parent_path() / "tokenizer_config.json";
      if (name == "tokenizer.json" && fs::is_regular_file(config))
        write_file_atomically((temp / "tokenizer_config.json").string(),
                              read_text_file(config.string()));
    }
    if (config.low_rank())  // what runs it without boostlm
      write_file_atomically((temp / kModelingFile).string(), std::string(modeling_boostlm_py()));
    fsync_directory(temp.string());
    if (fs::exists(final_dir)) fs::remove(final_dir);
    fs::rename(temp, final_dir);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(temp, ignored);
    throw;
  }
  return dtype.torch;
}

}  // namespace boostlm
