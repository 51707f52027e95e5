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
    case Arch::lax:
      return "lax";
  }
  return "?";
}

std::string to_string(LaxGate gate) {
  return gate == LaxGate::kron ? "kron" : "linear";
}

LaxGate parse_lax_gate(const std::string& text) {
  if (text == "kron") return LaxGate::kron;
  if (text == "linear") return LaxGate::linear;
  throw error("config: unknown lax_gate '", text, "' (expected kron or linear)");
}

std::pair<int64_t, int64_t> kron_factors(int64_t rank) {
  int64_t q = 1;
  for (int64_t f = 1; f * f <= rank; ++f)
    if (rank % f == 0) q = f;
  return {rank / q, q};
}

Arch parse_arch(const std::string& text) {
  if (text == "dense") return Arch::dense;
  if (text == "svd") return Arch::svd;
  if (text == "cola") return Arch::cola;
  if (text == "lax") return Arch::lax;
  throw error("config: unknown arch '", text, "' (expected dense, svd, cola or lax)");
}

const char* to_string(ProjKind kind) {
  static constexpr const char* kNames[kProjectionsPerBlock] = {"q",    "k",  "v",   "o",
                                                               "gate", "up", "down"};
  return kNames[static_cast<int>(kind)];
}

ProjKind parse_proj_kind(const std::string& text) {
  for (ProjKind kind : kProjKinds)
    if (text == to_string(kind)) return kind;
  throw error("unknown projection family '", text, "' (expected q, k, v, o, gate, up or down)");
}

namespace {

// "q_rank", ..., "down_rank": a family's own field.
std::string rank_field(ProjKind kind) {
  return std::string(to_string(kind)) + "_rank";
}

}  // namespace

int64_t ModelConfig::rank(ProjKind kind) const {
  if (!low_rank()) return 0;
  const int64_t own = family_ranks[static_cast<int>(kind)];
  return own > 0 ? own : is_attention(kind) ? attn_rank : mlp_rank;
}

bool ModelConfig::uniform_rank(bool attention) const {
  int64_t first = -1;
  for (ProjKind kind : kProjKinds) {
    if (is_attention(kind) != attention) continue;
    if (first < 0) first = rank(kind);
    if (rank(kind) != first) return false;
  }
  return true;
}

std::array<int64_t, kProjectionsPerBlock> ModelConfig::ranks() const {
  std::array<int64_t, kProjectionsPerBlock> out{};
  for (ProjKind kind : kProjKinds) out[static_cast<int>(kind)] = rank(kind);
  return out;
}

void ModelConfig::set_ranks(const std::array<int64_t, kProjectionsPerBlock>& ranks) {
  family_ranks = ranks;
  attn_rank = mlp_rank = 0;
  for (bool attention : {true, false}) {
    if (!uniform_rank(attention)) continue;
    (attention ? attn_rank : mlp_rank) = ranks[attention ? 0 : 4];
    for (ProjKind kind : kProjKinds)
      if (is_attention(kind) == attention) set_rank(kind, 0);
  }
}

std::string ModelConfig::rank_source(ProjKind kind) const {
  if (family_ranks[static_cast<int>(kind)] > 0) return rank_field(kind);
  return is_attention(kind) ? "attn_rank" : "mlp_rank";
}

std::string ModelConfig::ranks_text() const {
  std::string out;
  auto add = [&](const std::string& name, int64_t rank) {
    out += (out.empty() ? "" : ", ") + name + " " + std::to_string(rank);
  };
  for (bool attention : {true, false}) {
    if (uniform_rank(attention)) {
      add(attention ? "attn" : "mlp", rank(attention ? ProjKind::q : ProjKind::gate));
      continue;
    }
    for (ProjKind kind : kProjKinds)
      if (is_attention(kind) == attention) add(to_string(kind), rank(kind));
  }
  return out;
}

namespace {

// A family's input and output widths, whole.
std::pair<int64_t, int64_t> family_dims(const ModelConfig& c, ProjKind kind) {
  switch (kind) {
    case ProjKind::k:
    case ProjKind::v:
      return {c.d_model, c.kv_dim()};
    case ProjKind::gate:
    case ProjKind::up:
      return {c.d_model, c.d_ff};
    case ProjKind::down:
      return {c.d_ff, c.d_model};
    default:
      return {c.d_model, c.d_model};
  }
}

void check_rank(const ModelConfig& c, ProjKind kind) {
  const std::string field = c.rank_source(kind);
  const int64_t rank = c.rank(kind);
  if (rank <= 0) throw error("config: ", field, "=", rank, " must be positive");
  const auto [d_in, d_out] = family_dims(c, kind);
  if (rank > std::min(d_in, d_out)) {
    const bool shorthand = field != rank_field(kind);
    throw error("config: ", field, "=", rank, " exceeds the dimension it factorises: the ",
                to_string(kind), " projection is ", d_in, " x ", d_out,
                ", so its rank can be at most ", std::min(d_in, d_out),
                shorthand ? " (give " + rank_field(kind) + " to set its rank alone)" : "");
  }
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
  if (low_rank())
    for (ProjKind kind : kProjKinds) check_rank(*this, kind);
}

ModelConfig ModelConfig::from_json(const nlohmann::json& json) {
  if (!json.is_object()) throw error("config: expected a JSON object");
  static const std::set<std::string> known = [] {
    std::set<std::string> fields = {
        "arch",    "vocab_size", "d_model",  "n_layers",    "n_heads",         "n_kv_heads",
        "d_ff",    "attn_rank",  "mlp_rank", "max_seq_len", "tied_embeddings", "mlp_gate_act",
        "rms_eps", "rope_theta", "name",     "lax_gate",    "lax_latent_act"};
    for (ProjKind kind : kProjKinds) fields.insert(rank_field(kind));
    return fields;
  }();
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
  // A family's own rank, else its shorthand: the shorthand is required while a family of its
  // kind has none of its own.
  bool attn_needed = false, mlp_needed = false, any_rank = false;
  for (ProjKind kind : kProjKinds) {
    const std::string field = rank_field(kind);
    int64_t& own = c.family_ranks[static_cast<int>(kind)];
    read(json, field.c_str(), own, false);
    if (c.low_rank() && json.contains(field) && own <= 0)
      throw error("config: ", field, "=", own, " must be positive");
    (is_attention(kind) ? attn_needed : mlp_needed) |= !json.contains(field);
    any_rank |= json.contains(field);
  }
  read(json, "attn_rank", c.attn_rank, c.low_rank() && attn_needed);
  read(json, "mlp_rank", c.mlp_rank, c.low_rank() && mlp_needed);
  any_rank |= json.contains("attn_rank") || json.contains("mlp_rank");
  if (!c.low_rank() && any_rank) {
    warn("config: attn_rank and mlp_rank are ignored by a dense model (arch \"dense\")");
    c.attn_rank = c.mlp_rank = 0;
    c.family_ranks.fill(0);
  }
  read(json, "max_seq_len", c.max_seq_len, false);
  read(json, "tied_embeddings", c.tied_embeddings, false);
  read(json, "mlp_gate_act", c.mlp_gate_act, false);
  read(json, "rms_eps", c.rms_eps, false);
  read(json, "rope_theta", c.rope_theta, false);
  if (json.contains("lax_gate") || json.contains("lax_latent_act")) {
    if (c.arch != Arch::lax)
      throw error("config: lax_gate and lax_latent_act are LaX's fields; arch is \"", arch, "\"");
    std::string gate = "kron";
    read(json, "lax_gate", gate, false);
    c.lax_gate = parse_lax_gate(gate);
    read(json, "lax_latent_act", c.lax_latent_act, false);
  }
  c.validate();
  return c;
}

std::pair<int64_t, int64_t> stage_layer_range(int64_t n_layers, int stages, int stage) {
  const int64_t base = n_layers / stages, extra = n_layers % stages;
  const int64_t first = stage * base + std::min<int64_t>(stage, extra);
  return {first, first + base + (stage < extra ? 1 : 0)};
}

int64_t logits_chunk_rows(int64_t vocab_columns, int64_t tokens, int64_t chunk_elements) {
  int64_t rows = chunk_elements / vocab_columns;
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
  if (arch == Arch::lax) {
    j["lax_gate"] = to_string(lax_gate);
    j["lax_latent_act"] = lax_latent_act;
  }
  if (low_rank()) {
    // The shorthand where a kind's families agree (what configs always held), else every family
    // of that kind its own rank.
    for (bool attention : {true, false}) {
      if (uniform_rank(attention)) {
        j[attention ? "attn_rank" : "mlp_rank"] = rank(attention ? ProjKind::q : ProjKind::gate);
        continue;
      }
      for (ProjKind kind : kProjKinds)
        if (is_attention(kind) == attention) j[rank_field(kind)] = rank(kind);
    }
  }
  return j;
}

}  // namespace boostlm
