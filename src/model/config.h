// Model configuration (SPEC §2): a LLaMA-style decoder whose seven projections per block are
// dense, plain low-rank (`svd`), CoLA low-rank (`cola`, SiLU on the latent) or LaX (`lax`: CoLA's
// factors with each projection's latent crossing into the same projection of the next block,
// model/lax.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include <nlohmann/json_fwd.hpp>

namespace boostlm {

enum class Arch { dense, svd, cola, lax };
std::string to_string(Arch arch);
Arch parse_arch(const std::string& text);  // throws Error

// LaX's r x r gate between one block's latent and the next's (model/lax.h): Kronecker-factored
// (the LaX authors' default) or a full linear map.
enum class LaxGate { kron, linear };
std::string to_string(LaxGate gate);
LaxGate parse_lax_gate(const std::string& text);  // throws Error
// The most balanced factor pair of r, p · q = r with p >= q (256: 16 x 16, 96: 12 x 8).
std::pair<int64_t, int64_t> kron_factors(int64_t rank);

// The seven projection families of a block (SPEC §2), in block order.
enum class ProjKind { q, k, v, o, gate, up, down };
constexpr int kProjectionsPerBlock = 7;
constexpr std::array<ProjKind, kProjectionsPerBlock> kProjKinds = {
    ProjKind::q,    ProjKind::k,  ProjKind::v,   ProjKind::o,
    ProjKind::gate, ProjKind::up, ProjKind::down};
const char* to_string(ProjKind kind);  // "q", "k", ..., "down"
inline bool is_attention(ProjKind kind) {
  return static_cast<int>(kind) < 4;
}
// A family by name ("q" ... "down"); throws Error naming the names it knows.
ProjKind parse_proj_kind(const std::string& text);

struct ModelConfig {
  Arch arch = Arch::cola;
  int64_t vocab_size = 0;
  int64_t d_model = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;  // defaults to n_heads
  int64_t d_ff = 0;
  // Low-rank architectures: each projection family has a rank. attn_rank and mlp_rank are the
  // shorthands: the rank of every attention (q/k/v/o) or MLP (gate/up/down) family that has none
  // of its own in family_ranks (0 there: none). rank() says what a family uses.
  int64_t attn_rank = 0;
  int64_t mlp_rank = 0;
  std::array<int64_t, kProjectionsPerBlock> family_ranks{};  // q_rank ... down_rank; 0: shorthand
  int64_t max_seq_len = 2048;
  bool tied_embeddings = false;
  bool mlp_gate_act = true;  // SiLU on the gate; CoLA variants may drop it (latents carry σ)
  // lax: the gate between blocks, and whether σ (SiLU) follows the latent's LayerNorm (false: the
  // ablation without σ).
  LaxGate lax_gate = LaxGate::kron;
  bool lax_latent_act = true;
  float rms_eps = 1e-6f;
  float rope_theta = 10000.0f;

  bool low_rank() const { return arch != Arch::dense; }
  // σ (SiLU) on the latent before B: cola, and lax unless its ablation turned it off.
  bool latent_act() const { return arch == Arch::cola || (arch == Arch::lax && lax_latent_act); }
  // The rank of a family's projections: its own, else its shorthand; 0 for a dense model.
  int64_t rank(ProjKind kind) const;
  // Gives a family its own rank (0: back to the shorthand).
  void set_rank(ProjKind kind, int64_t rank) { family_ranks[static_cast<int>(kind)] = rank; }
  // The field a family's rank comes from: its own ("k_rank"), or its shorthand ("attn_rank").
  std::string rank_source(ProjKind kind) const;
  // Whether the four attention families (attention true) or the three MLP ones share one rank.
  bool uniform_rank(bool attention) const;
  // Every family's rank, in kProjKinds order; and setting them all: as the shorthand where a
  // kind's families agree, else each family its own.
  std::array<int64_t, kProjectionsPerBlock> ranks() const;
  void set_ranks(const std::array<int64_t, kProjectionsPerBlock>& ranks);
  // "q 64, k 32, v 32, o 64, gate 96, up 96, down 96", or "attn 16, mlp 24" where kinds agree.
  std::string ranks_text() const;
  int64_t head_dim() const { return d_model / n_heads; }
  int64_t kv_dim() const { return n_kv_heads * head_dim(); }

  // Throws Error with a message naming the field when the configuration is unusable.
  void validate() const;

  static ModelConfig from_json(const nlohmann::json& json);  // validates
  static ModelConfig load(const std::string& path);          // validates
  nlohmann::json to_json() const;
};

// The blocks of pipeline stage `stage` of `stages`, [first, last): as even as the layers allow,
// the first n_layers % stages stages one more. The engine's stages and the planner's both.
std::pair<int64_t, int64_t> stage_layer_range(int64_t n_layers, int stages, int stage);

// Rows of the logits the head computes at once, of `tokens` rows of `vocab_columns` (the rank's
// vocabulary slice): at most `chunk_elements` (the backend's, kernels/cross_entropy.h's
// logits_chunk_elements: 64 MiB of fp32 on the host, 256 MiB on a GPU), so [N, V] is never held
// whole.
int64_t logits_chunk_rows(int64_t vocab_columns, int64_t tokens, int64_t chunk_elements);

}  // namespace boostlm
