// The layout registry: one entry per layout (its name, properties, factory and cost model), and
// everything that asks it by name or kind. A new layout is a folder src/parallel/<name>/ with its
// blocks and its cost.cpp, and one entry in built_in_layouts().
#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "parallel/layout.h"
#include "parallel/layout_cost.h"

namespace boostlm {

namespace {

std::deque<LayoutTraits> built_in_layouts() {
  // clang-format off
  return {
    {LayoutKind::dense_tp, "dense-tp", "dense model, Megatron TP",
     /*low_rank=*/false, /*hidden_sharded_residual=*/false, /*keeps_latents=*/false,
     /*shards_ranks=*/false, make_dense_tp, &dense_tp_cost()},
    {LayoutKind::naive_tp, "naive-tp", "low-rank model, each factor pair Megatron TP",
     true, false, false, true, make_naive_tp, &naive_tp_cost()},
    {LayoutKind::btp, "btp", "low-rank model, BOOST: online norm, grouping",
     true, true, true, false, make_btp, &btp_cost()},
  };
  // clang-format on
}

std::deque<LayoutTraits>& registry() {
  static std::deque<LayoutTraits> layouts = built_in_layouts();
  return layouts;
}

size_t built_in_count() {
  static const size_t count = built_in_layouts().size();
  return count;
}

}  // namespace

const std::deque<LayoutTraits>& layout_registry() {
  return registry();
}

const LayoutTraits& layout_traits(LayoutKind kind) {
  for (const LayoutTraits& t : layout_registry())
    if (t.kind == kind) return t;
  BOOSTLM_ASSERT_MSG(false, "layout missing from the registry");
  std::abort();
}

const LayoutCost& layout_cost(LayoutKind kind) {
  const LayoutTraits& traits = layout_traits(kind);
  BOOSTLM_ASSERT_MSG(traits.cost != nullptr, "a registered layout has no cost model");
  return *traits.cost;
}

LayoutKind register_layout(LayoutTraits traits) {
  BOOSTLM_ASSERT(traits.name != nullptr);
  int next = 0;
  for (const LayoutTraits& t : layout_registry()) {
    if (std::string(t.name) == traits.name)
      throw error("layout '", traits.name, "' is registered already");
    next = std::max(next, static_cast<int>(t.kind) + 1);
  }
  traits.kind = static_cast<LayoutKind>(next);
  registry().push_back(traits);
  return traits.kind;
}

void unregister_layout(LayoutKind kind) {
  std::deque<LayoutTraits>& layouts = registry();
  BOOSTLM_ASSERT_MSG(layouts.size() > built_in_count() && layouts.back().kind == kind,
                     "only the layout registered last can be removed, never a built-in one");
  layouts.pop_back();
}

std::vector<std::string> layout_names() {
  std::vector<std::string> names;
  for (const LayoutTraits& t : layout_registry()) names.push_back(t.name);
  return names;
}

std::vector<LayoutKind> layouts_for(bool low_rank) {
  std::vector<LayoutKind> out;
  for (const LayoutTraits& t : layout_registry())
    if (t.low_rank == low_rank) out.push_back(t.kind);
  return out;
}

std::string to_string(LayoutKind kind) {
  return layout_traits(kind).name;
}

LayoutKind parse_layout(const std::string& text) {
  std::string expected;
  for (const LayoutTraits& t : layout_registry()) {
    if (text == t.name) return t.kind;
    expected += (expected.empty() ? "" : ", ") + std::string(t.name);
  }
  throw error("unknown layout '", text, "' (expected one of ", expected, ")");
}

void check_options(LayoutKind kind, const BlockOptions& options) {
  if (options.recompute == Recompute::lowrank && !layout_traits(kind).keeps_latents)
    throw error("--recompute lowrank checkpoints BTP's all-reduced latents; layout ",
                to_string(kind),
                " has none to recompute from without communication (use --recompute block)");
}

LayoutKind default_layout(const ModelConfig& config) {
  return config.low_rank() ? LayoutKind::btp : LayoutKind::dense_tp;
}

void check_layout(LayoutKind kind, const ModelConfig& c, int t) {
  const LayoutTraits& traits = layout_traits(kind);
  const std::string name = traits.name;
  auto names = [](bool low_rank) {
    std::string out;
    for (LayoutKind k : layouts_for(low_rank)) out += (out.empty() ? "" : " or ") + to_string(k);
    return out;
  };
  if (!traits.low_rank && c.low_rank())
    throw error("layout ", name, " is for the dense model; a ", to_string(c.arch),
                " model runs under ", names(true));
  if (traits.low_rank && !c.low_rank())
    throw error("layout ", name, " shards low-rank factors; the dense model runs under ",
                names(false));
  // The refusal names what would work: the nearest values that divide, and the TP sizes up to 8
  // this value allows (the 1b preset's d_ff=5461, CoLA's own, divides by none but 1; the
  // paper's 1B uses 5472).
  auto divisible = [&](const char* what, int64_t value) {
    if (value % t == 0) return;
    const int64_t below = value - value % t, above = below + t;
    std::string sizes;
    for (int k = 1; k <= 8; ++k)
      if (value % k == 0) sizes += (sizes.empty() ? "" : ", ") + std::to_string(k);
    throw error("layout ", name, ": ", what, "=", value, " is not divisible by tp=", t,
                ": the nearest values that are, ", below, " and ", above,
                ", go in the model's config; or a TP size that divides it (up to 8: ", sizes, ")");
  };
  divisible("vocab_size", c.vocab_size);
  if (traits.shards_ranks) {
    // Every family's rank is split over the group: name the family and where its rank came from.
    for (ProjKind kind : kProjKinds)
      if (c.rank(kind) % t != 0)
        throw error("layout ", name, ": the ", to_string(kind), " projections' rank ", c.rank(kind),
                    " (", c.rank_source(kind), ") is not divisible by tp=", t, ": ", name,
                    " splits every rank over the TP group; give each rank a multiple of ", t,
                    " or use a layout that shards heads and d_ff instead (btp)");
  } else {
    divisible("n_heads", c.n_heads);
    divisible("n_kv_heads", c.n_kv_heads);
    divisible("d_ff", c.d_ff);
  }
}

std::unique_ptr<Layout> make_layout(LayoutKind kind, const ModelConfig& config, Communicator& tp) {
  check_layout(kind, config, tp.size());
  const LayoutTraits& traits = layout_traits(kind);
  if (traits.make == nullptr)
    throw error("layout ", traits.name, " describes its costs only; it cannot run blocks");
  return traits.make(config, tp);
}

}  // namespace boostlm
