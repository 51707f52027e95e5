#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "core/dtype.h"

#include "core/error.h"

namespace boostlm {

std::string to_string(Arch arch) {
  switch (arch) {
    case Arch::dense:
      return "dense";
    case Arch::svd:
      return "svd";
    case Arch::cola:
      return "cola";
  }
  return "?";
}

Arch parse_arch(const std::string& text) {
  if (text == "dense") return Arch::dense;
  if (text == "svd") return Arch::svd;
  if (text == "cola") return Arch::cola;
  throw error("config: unknown arch '", text, "' (expected dense, svd or cola)");
}

namespace {

void check_rank(const char* field, int64_t rank, const char* proj, int64_t d_in, int64_t d_out) {
  if (rank > std::min(d_in, d_out))
    throw error("config: ", field, "=", rank, " exceeds the dimension it factorises: the ", proj,
                " projection is ", d_in, " x ", d_out, ", so its rank can be at most ",
                std::min(d_in, d_out));
}

template <typename T>
void read(const nlohmann::json& json, const char* field, T& out, bool required) {
  auto it = json.find(field);
  if (it == json.end()) {
    if (required) throw error("config: missing required field '", field, "'");
    return;
  }
  // nlohmann converts 128.5 to an integer 128 and true to 1 without a word: refuse both.
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (!it->is_number_integer())
      throw error("config: field '", field, "' has the wrong type: it must be an integer (found ",
                  it->dump(), ")");
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!it->is_number())
      throw error("config: field '", field, "' has the wrong type: it must be a number (found ",
                  it->dump(), ")");
  }
  try {
    out = it->template get<T>();
  } catch (const nlohmann::json::exception&) {
    throw error("config: field '", field, "' has the wrong type (", it->dump(), ")");
  }
}

}  // namespace

void ModelConfig::validate() const {
  auto positive = [](const char* field, int64_t value) {
    if (value <= 0) throw error("config: ", field, "=", value, " must be positive");
  };
  positive("vocab_size", vocab_size);
  positive("d_model", d_model);
  positive("n_layers", n_layers);
  positive("n_heads", n_heads);
  positive("n_kv_heads", n_kv_heads);
  positive("d_ff", d_ff);
  positive("max_seq_len", max_seq_len);
  if (d_model % n_heads != 0)
    throw error("config: d_model=", d_model, " is not divisible by n_heads=", n_heads);
  if (n_heads % n_kv_heads != 0)
    throw error("config: n_heads=", n_heads, " is not divisible by n_kv_heads=", n_kv_heads);
  if (head_dim() % 2 != 0)
    throw error("config: head dim d_model/n_heads=", head_dim(), " must be even for RoPE");
  if (!(rms_eps > 0.0f) || !std::isfinite(rms_eps))
    throw error("config: rms_eps=", rms_eps, " must be a finite number above 0");
  if (!(rope_theta > 0.0f) || !std::isfinite(rope_theta))
    throw error("config: rope_theta=", rope_theta, " must be a finite number above 0");
  if (low_rank()) {
    positive("attn_rank", attn_rank);
    positive("mlp_rank", mlp_rank);
    check_rank("attn_rank", attn_rank, "q", d_model, d_model);
    check_rank("attn_rank", attn_rank, "k/v", d_model, kv_dim());
    check_rank("mlp_rank", mlp_rank, "gate/up", d_model, d_ff);
    check_rank("mlp_rank", mlp_rank, "down", d_ff, d_model);
  }
}

ModelConfig ModelConfig::from_json(const nlohmann::json& json) {
  if (!json.is_object()) throw error("config: expected a JSON object");
  static const std::set<std::string> known = {
      "arch",    "vocab_size", "d_model",  "n_layers",    "n_heads",         "n_kv_heads",
      "d_ff",    "attn_rank",  "mlp_rank", "max_seq_len", "tied_embeddings", "mlp_gate_act",
      "rms_eps", "rope_theta", "name"};
  for (const auto& item : json.items())
    if (!known.count(item.key())) throw error("config: unknown field '", item.key(), "'");

  ModelConfig c;
  std::string arch;
  read(json, "arch", arch, true);
  c.arch = parse_arch(arch);
  read(json, "vocab_size", c.vocab_size, true);
  read(json, "d_model", c.d_model, true);
  read(json, "n_layers", c.n_layers, true);
  read(json, "n_heads", c.n_heads, true);
  c.n_kv_heads = c.n_heads;
  read(json, "n_kv_heads", c.n_kv_heads, false);
  read(json, "d_ff", c.d_ff, true);
  read(json, "attn_rank", c.attn_rank, c.low_rank());
  read(json, "mlp_rank", c.mlp_rank, c.low_rank());
  if (!c.low_rank() && (json.contains("attn_rank") || json.contains("mlp_rank"))) {
    warn("config: attn_rank and mlp_rank are ignored by a dense model (arch \"dense\")");
    c.attn_rank = c.mlp_rank = 0;
  }
  read(json, "max_seq_len", c.max_seq_len, false);
  read(json, "tied_embeddings", c.tied_embeddings, false);
  read(json, "mlp_gate_act", c.mlp_gate_act, false);
  read(json, "rms_eps", c.rms_eps, false);
  read(json, "rope_theta", c.rope_theta, false);
  c.validate();
  return c;
}

std::pair<int64_t, int64_t> stage_layer_range(int64_t n_layers, int stages, int stage) {
  const int64_t base = n_layers / stages, extra = n_layers % stages;
  const int64_t first = stage * base + std::min<int64_t>(stage, extra);
  return {first, first + base + (stage < extra ? 1 : 0)};
}

int64_t logits_chunk_rows(int64_t vocab_columns, int64_t tokens) {
  constexpr int64_t kLogitsChunkElements = int64_t{16} << 20;
  int64_t rows = kLogitsChunkElements / vocab_columns;
  // A multiple of 64 rows where that fits: oneDNN's bf16 head GEMMs ran 5-10% faster at 512 rows
  // than at 524 (32000 columns, one process).
  if (rows > 64) rows -= rows % 64;
  return std::clamp<int64_t>(rows, 1, tokens);
}

ModelConfig ModelConfig::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw error("config: cannot open '", path, "'");
  nlohmann::json json;
  try {
    in >> json;
  } catch (const nlohmann::json::exception& e) {
    throw error("config: '", path, "' is not valid JSON: ", e.what());
  }
  try {
    return from_json(json);
  } catch (const Error& e) {
    throw error(e.what(), " (in ", path, ")");
  }
}

nlohmann::json ModelConfig::to_json() const {
  nlohmann::json j = {{"arch", to_string(arch)},
                      {"vocab_size", vocab_size},
                      {"d_model", d_model},
                      {"n_layers", n_layers},
                      {"n_heads", n_heads},
                      {"n_kv_heads", n_kv_heads},
                      {"d_ff", d_ff},
                      {"max_seq_len", max_seq_len},
                      {"tied_embeddings", tied_embeddings},
                      {"mlp_gate_act", mlp_gate_act},
                      {"rms_eps", float_as_decimal(rms_eps)},
                      {"rope_theta", float_as_decimal(rope_theta)}};
  if (low_rank()) {
    j["attn_rank"] = attn_rank;
    j["mlp_rank"] = mlp_rank;
  }
  return j;
}

}  // namespace boostlm
