// A Hugging Face byte-level BPE (tokenizer.json) as GGUF's `gpt2` tokenizer.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "data/bpe.h"
#include "data/tokenizer.h"
#include "formats/gguf_vocab.h"

namespace boostlm {
namespace {

using nlohmann::json;

// The pre-tokenizer patterns llama.cpp names (its llama-vocab.cpp maps each name to its own
// rendering of the pattern; convert_hf_to_gguf.py gives GPT-2's tokenizers "gpt-2" and LLaMA 3's
// "llama-bpe"), as tokenizer.json spells them, and whether llama.cpp then looks a whole piece up
// before merging (it sets ignore_merges for llama-bpe).
struct KnownPreTokenizer {
  const char* name;
  const char* pattern;
  bool ignores_merges;
};
constexpr KnownPreTokenizer kKnownPreTokenizers[] = {
    {"gpt-2", R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re",
     false},
    {"llama-bpe",
     R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
     true},
};

// GPT-2's pattern, which ByteLevel with use_regex applies (Hugging Face's tokenizers).
constexpr const char* kByteLevelPattern = kKnownPreTokenizers[0].pattern;

std::string shown(const json& value) {
  std::string text = value.dump();
  if (text.size() > 300) text = text.substr(0, 300) + "...";
  return text;
}

// The one regex that splits text before the byte-level mapping: ByteLevel's own (use_regex), or a
// Split (Isolated) followed by a ByteLevel without one. Throws naming `path` for anything else.
std::string split_pattern(const json& pre, const std::string& path) {
  const auto refuse = [&](const std::string& why) {
    return error(path, ": pre-tokenizer ", shown(pre), " ", why,
                 "; GGUF's gpt2 tokenizer splits text by one pattern that llama.cpp names");
  };
  if (pre.is_null()) throw refuse("is none (byte-level BPE splits text by a pattern)");
  const std::string type = pre.value("type", "");
  const auto check_byte_level = [&](const json& byte_level, bool with_regex) {
    if (byte_level.value("add_prefix_space", false))
      throw refuse("adds a leading space, which llama.cpp's gpt2 tokenizer never does");
    if (byte_level.value("use_regex", true) != with_regex)
      throw refuse(with_regex ? "is ByteLevel without its regex: nothing splits the text"
                              : "splits the text twice (a Split, then ByteLevel's own regex)");
  };
  if (type == "ByteLevel") {
    check_byte_level(pre, true);
    return kByteLevelPattern;
  }
  if (type == "Sequence") {
    const json& steps = pre.at("pretokenizers");
    if (steps.size() == 1) return split_pattern(steps[0], path);
    if (steps.size() == 2 && steps[0].value("type", "") == "Split" &&
        steps[1].value("type", "") == "ByteLevel") {
      const json& split = steps[0];
      if (split.value("behavior", "") != "Isolated" || split.value("invert", false) ||
          !split.at("pattern").contains("Regex"))
        throw refuse("splits other than by isolating the matches of a regex");
      check_byte_level(steps[1], false);
      return split.at("pattern").at("Regex").get<std::string>();
    }
  }
  throw refuse("is not one of ByteLevel or a Split then a ByteLevel");
}

const KnownPreTokenizer& name_pre_tokenizer(const std::string& pattern, const std::string& path) {
  for (const KnownPreTokenizer& known : kKnownPreTokenizers) {
    if (pattern == known.pattern) return known;
  }
  std::string names;
  for (const KnownPreTokenizer& known : kKnownPreTokenizers)
    names += std::string(names.empty() ? "" : ", ") + known.name;
  throw error(path, ": its pre-tokenizer pattern ", pattern,
              " is not one boostlm can name for llama.cpp (tokenizer.ggml.pre; it knows ", names,
              "), so GGUF export cannot embed this tokenizer");
}

}  // namespace

ByteLevelBpeVocab read_byte_level_bpe_vocab(const std::string& path) {
  // boostlm's own reading refuses what it cannot reproduce and names BOS, EOS and the
  // post-processor's tokens.
  const Tokenizer tokenizer = Tokenizer::load(path);
  const BpeTokenizer* bpe = tokenizer.bpe();
  if (!bpe) throw error(path, ": not a tokenizer.json");

  ByteLevelBpeVocab v;
  try {
    const json root = json::parse(read_text_file(path));
    if (!root.value("normalizer", json()).is_null())
      throw error(path, ": normalizer ", shown(root["normalizer"]),
                  ": llama.cpp's gpt2 tokenizer normalizes nothing, so it would split text "
                  "differently; GGUF export cannot embed this tokenizer");
    const KnownPreTokenizer& known =
        name_pre_tokenizer(split_pattern(root.value("pre_tokenizer", json()), path), path);
    v.pre = known.name;
    v.llama_ignores_merges = known.ignores_merges;

    const json& model = root.at("model");
    v.ignore_merges = model.value("ignore_merges", false);
    const auto size = static_cast<size_t>(bpe->vocab_size());
    v.tokens.assign(size, "");
    v.types.assign(size, static_cast<int32_t>(PieceType::unused));
    for (const auto& [text, id] : model.at("vocab").items()) {
      v.tokens.at(id.get<size_t>()) = text;
      v.types[id.get<size_t>()] = static_cast<int32_t>(PieceType::normal);
    }
    for (const json& added : root.value("added_tokens", json::array())) {
      const auto id = added.at("id").get<size_t>();
      const std::string content = added.at("content").get<std::string>();
      v.tokens.at(id) = content;
      v.types[id] = static_cast<int32_t>(added.value("special", false) ? PieceType::control
                                                                       : PieceType::user_defined);
      // The two readings agree on what an added token is.
      if (bpe->decode({static_cast<int32_t>(id)}) != content)
        throw error(path, ": added token ", id, " reads differently through boostlm's tokenizer");
    }
    for (size_t i = 0; i < size; ++i) {
      const bool defined = v.types[i] != static_cast<int32_t>(PieceType::unused);
      if (defined != bpe->has_token(static_cast<int32_t>(i)))
        throw error(path, ": token ", i, " reads differently through boostlm's tokenizer");
      if (!defined) v.tokens[i] = "[PAD" + std::to_string(i) + "]";
    }
    for (const json& merge : model.at("merges")) {
      v.merges.push_back(merge.is_array()
                             ? merge.at(0).get<std::string>() + " " + merge.at(1).get<std::string>()
                             : merge.get<std::string>());
    }
  } catch (const json::exception& e) {
    throw error(path, ": not a valid tokenizer.json (", e.what(), ")");
  }

  v.bos_id = bpe->bos_id();
  v.eos_id = bpe->eos_id();
  // llama.cpp adds at most one BOS before and one EOS after a text (add_bos_token /
  // add_eos_token); a post-processor that adds other tokens cannot be followed.
  const std::vector<int32_t>& before = bpe->prefix_ids();
  const std::vector<int32_t>& after = bpe->suffix_ids();
  if (!before.empty() && (before.size() != 1 || before[0] != v.bos_id))
    throw error(path, ": its post-processor puts ", before.size(),
                " token(s) before a text; llama.cpp can add only its BOS");
  if (!after.empty() && (after.size() != 1 || after[0] != v.eos_id))
    throw error(path, ": its post-processor puts ", after.size(),
                " token(s) after a text; llama.cpp can add only its EOS");
  v.add_bos = !before.empty();
  v.add_eos = !after.empty();
  return v;
}

}  // namespace boostlm
