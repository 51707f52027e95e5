// Hugging Face byte-level BPE (tokenizer.json: GPT-2, LLaMA 3, Qwen2, SmolLM): the ids
// Hugging Face's `tokenizers` gives, from its added tokens, pre-tokenizer regex (PCRE2 with its
// JIT), byte-to-unicode mapping and merges by rank. Behind Tokenizer (data/tokenizer.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace boostlm {

class BpeTokenizer {
 public:
  // Parses `json`, the bytes of the tokenizer.json at `path` (named in errors). `config_json`
  // is the tokenizer_config.json beside it, or "": where the post-processor names no BOS, its
  // bos_token and eos_token name them. Throws Error for anything it cannot reproduce exactly
  // (another model type, a normalizer, a pre-tokenizer or decoder it does not know).
  BpeTokenizer(const std::string& path, std::string_view json, std::string_view config_json);
  ~BpeTokenizer();
  BpeTokenizer(const BpeTokenizer&) = delete;
  BpeTokenizer& operator=(const BpeTokenizer&) = delete;

  // The ids of `text` without the post-processor's tokens (HF's add_special_tokens=False).
  // Ill-formed UTF-8 is first replaced, one U+FFFD per maximal ill-formed subpart (WHATWG's and
  // JavaScript's TextDecoder rule). Safe to call from several threads at once.
  std::vector<int32_t> encode(std::string_view text) const;
  // The tokens the post-processor puts before and after one sequence (TemplateProcessing's
  // "single"; none for ByteLevel): encode(text) between them is HF's encode(text).
  const std::vector<int32_t>& prefix_ids() const;
  const std::vector<int32_t>& suffix_ids() const;

  // The bytes of `ids` (the ByteLevel decoder; special tokens' text included). Not re-validated:
  // the bytes of a prefix of a sequence may end inside a character.
  std::string decode(const std::vector<int32_t>& ids) const;

  int64_t vocab_size() const;  // the largest id + 1, added tokens included
  int32_t bos_id() const;      // -1 when none is named
  int32_t eos_id() const;      // -1 when none is named
  bool has_token(int32_t id) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Appends code point `cp` to `out` in UTF-8.
void append_utf8(uint32_t cp, std::string& out);

// Appends `text` to `out` with each ill-formed UTF-8 subsequence replaced by U+FFFD, one per
// maximal subpart (Unicode §3.9, "U+FFFD substitution of maximal subparts"; what WHATWG's UTF-8
// decoder, and so Node's Buffer.toString and TextDecoder, do). Returns whether any was replaced.
bool sanitize_utf8(std::string_view text, std::string& out);

}  // namespace boostlm
