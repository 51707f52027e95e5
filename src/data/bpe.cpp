#include "data/bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <limits>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "core/error.h"

namespace boostlm {
namespace {

using nlohmann::json;

constexpr uint64_t kNoMerge = ~uint64_t{0};
constexpr size_t kShortPiece = 96;  // longer pieces merge through a heap

// GPT-2's byte-to-unicode table: printable Latin-1 bytes stand for themselves, the other 68
// bytes for U+0100 onwards in byte order, so every byte has a visible, non-space character.
std::array<uint32_t, 256> byte_to_codepoint() {
  std::array<uint32_t, 256> table{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool kept = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    table[b] = kept ? b : next++;
  }
  return table;
}

// Decodes the code point at `text[i]` of valid UTF-8 and advances i.
uint32_t next_codepoint(std::string_view text, size_t& i) {
  const auto b = static_cast<unsigned char>(text[i]);
  const int length = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  uint32_t cp = length == 1 ? b : length == 2 ? b & 0x1F : length == 3 ? b & 0x0F : b & 0x07;
  for (int k = 1; k < length; ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
  i += static_cast<size_t>(length);
  return cp;
}

// The length of the well-formed sequence at text[i] (Unicode Table 3-7), or 0 when ill-formed;
// `subpart` is then the length of its maximal subpart (at least 1).
int well_formed_length(std::string_view text, size_t i, int& subpart) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b = at(i);
  int length = 0;
  unsigned char low = 0x80, high = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    length = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    length = 3;
    if (b == 0xE0) low = 0xA0;
    if (b == 0xED) high = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    length = 4;
    if (b == 0xF0) low = 0x90;
    if (b == 0xF4) high = 0x8F;
  } else {
    subpart = 1;
    return 0;
  }
  for (int k = 1; k < length; ++k) {
    const bool in_range = i + k < text.size() && at(i + k) >= (k == 1 ? low : 0x80) &&
                          at(i + k) <= (k == 1 ? high : 0xBF);
    if (!in_range) {
      subpart = k;
      return 0;
    }
  }
  return length;
}

bool valid_utf8(std::string_view text) {
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    if (i + 8 <= n) {
      uint64_t word;
      std::memcpy(&word, text.data() + i, 8);
      if ((word & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    int subpart = 0;
    const int length = well_formed_length(text, i, subpart);
    if (length == 0) return false;
    i += static_cast<size_t>(length);
  }
  return true;
}

// An open-addressing map from a pair of token ids to (rank << 32 | merged id): the merge table,
// read for every adjacent pair of every piece not in the cache.
class PairMap {
 public:
  void reserve(size_t count) {
    size_t capacity = 16;
    while (capacity < 2 * count) capacity *= 2;
    keys_.assign(capacity, kEmpty);
    values_.assign(capacity, kNoMerge);
    mask_ = capacity - 1;
  }
  // Later entries replace earlier ones, as Hugging Face's map built from the merge list does.
  void put(int32_t a, int32_t b, uint64_t value) {
    const uint64_t key = pack(a, b);
    size_t slot = hash(key) & mask_;
    while (keys_[slot] != kEmpty && keys_[slot] != key) slot = (slot + 1) & mask_;
    keys_[slot] = key;
    values_[slot] = value;
  }
  uint64_t get(int32_t a, int32_t b) const {
    const uint64_t key = pack(a, b);
    for (size_t slot = hash(key) & mask_;; slot = (slot + 1) & mask_) {
      if (keys_[slot] == key) return values_[slot];
      if (keys_[slot] == kEmpty) return kNoMerge;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t pack(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static size_t hash(uint64_t key) { return (key * 0x9E3779B97F4A7C15ull) >> 20; }
  std::vector<uint64_t> keys_, values_;
  size_t mask_ = 0;
};

// The ids of recently seen pieces, per thread: most text is a few thousand distinct words.
// Cleared whole when full, which bounds it at kMaxEntries pieces of at most kMaxPieceBytes.
class PieceCache {
 public:
  static constexpr size_t kMaxPieceBytes = 128;
  static constexpr size_t kMaxEntries = 1 << 15;

  PieceCache() { clear(); }
  void clear() {
    slots_.assign(2 * kMaxEntries, Entry{});
    keys_.clear();
    ids_.clear();
    entries_ = 0;
  }
  // The ids of `piece` appended to `out`, or false when not cached.
  bool find(std::string_view piece, size_t hash, std::vector<int32_t>& out) const {
    for (size_t slot = hash & mask();; slot = (slot + 1) & mask()) {
      const Entry& e = slots_[slot];
      if (e.ids_length == 0) return false;
      if (e.hash == hash && e.key_length == piece.size() &&
          std::memcmp(keys_.data() + e.key_offset, piece.data(), piece.size()) == 0) {
        out.insert(out.end(), ids_.begin() + e.ids_offset,
                   ids_.begin() + e.ids_offset + e.ids_length);
        return true;
      }
    }
  }
  void insert(std::string_view piece, size_t hash, const int32_t* ids, size_t count) {
    if (entries_ >= kMaxEntries) clear();
    size_t slot = hash & mask();
    while (slots_[slot].ids_length != 0) slot = (slot + 1) & mask();
    slots_[slot] = {hash, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(piece.size()),
                    static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(count)};
    keys_.append(piece);
    ids_.insert(ids_.end(), ids, ids + count);
    ++entries_;
  }

 private:
  struct Entry {
    size_t hash = 0;
    uint32_t key_offset = 0, key_length = 0, ids_offset = 0, ids_length = 0;
  };
  size_t mask() const { return slots_.size() - 1; }
  std::vector<Entry> slots_;
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t entries_ = 0;
};

// What each thread keeps between calls: PCRE2's match state and JIT stack, the piece cache (of
// the tokenizer that used it last) and scratch space, so encoding allocates only as its output
// grows.
struct ThreadState {
  uint64_t owner = 0;
  pcre2_match_data* match = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  PieceCache cache;
  std::string clean, prefixed, normalized;
  std::vector<int32_t> symbols;
  std::vector<uint64_t> pair_values;
  std::vector<int32_t> prev, next;

  ThreadState() {
    match = pcre2_match_data_create(8, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
    if (!match || !context || !jit_stack) throw error("tokenizer: out of memory for PCRE2");
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(match);
  }
};

ThreadState& thread_state(uint64_t owner) {
  thread_local ThreadState state;
  if (state.owner != owner) {
    state.cache.clear();
    state.owner = owner;
  }
  return state;
}

std::atomic<uint64_t> next_tokenizer_serial{1};

// Unicode's White_Space property, which Hugging Face's regex engine (Oniguruma) and tiktoken's
// (fancy-regex) give \s; PCRE2's \s lacks U+0085 and JavaScript's adds U+FEFF.
constexpr std::string_view kWhiteSpace =
    "\\t\\n\\x0B\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

// The pre-tokenizer pattern as PCRE2 reads it with \s and \S spelled out (see kWhiteSpace).
std::string translate_pattern(std::string_view pattern, const std::string& path) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char escaped = pattern[++i];
      if (escaped == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (escaped == 'S') {
        if (in_class)
          throw error(path,
                      ": pre-tokenizer pattern has \\S inside a character class, which "
                      "boostlm cannot translate");
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += escaped;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

// GPT-2's pattern, which ByteLevel's use_regex applies.
constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class Regex {
 public:
  Regex(const std::string& pattern, const std::string& path) {
    int code = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP, &code, &offset, nullptr);
    if (!code_) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(code, message, sizeof message);
      throw error(path, ": cannot compile the pre-tokenizer pattern at offset ", offset, " (",
                  reinterpret_cast<const char*>(message), "): ", pattern);
    }
    jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls piece(begin, end) for each match of `text` and each gap between matches, in order
  // (Split with behavior Isolated; empty matches give nothing). `text` must be valid UTF-8.
  template <typename Piece>
  void split(std::string_view text, ThreadState& state, const std::string& path,
             Piece&& piece) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.match);
    size_t done = 0, start = 0;
    while (start <= text.size()) {
      const int rc =
          jit_ ? pcre2_jit_match(code_, subject, text.size(), start, 0, state.match, state.context)
               : pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, state.match,
                             state.context);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(rc, message, sizeof message);
        throw error(path, ": pre-tokenizer pattern failed on a ", text.size(),
                    "-byte piece of text: ", reinterpret_cast<const char*>(message));
      }
      const size_t begin = ovector[0], end = ovector[1];
      if (begin > done) piece(done, begin);
      if (end > begin) piece(begin, end);
      done = end;
      if (end > begin) {
        start = end;
      } else {
        if (end >= text.size()) break;
        size_t after = end;
        next_codepoint(text, after);
        start = after;
      }
    }
    if (done < text.size()) piece(done, text.size());
  }

 private:
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

std::string token_name(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content")) return value["content"].get<std::string>();
  return "";
}

}  // namespace

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool sanitize_utf8(std::string_view text, std::string& out) {
  bool replaced = false;
  size_t i = 0;
  while (i < text.size()) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      out += text[i++];
      continue;
    }
    int subpart = 0;
    const int length = well_formed_length(text, i, subpart);
    if (length > 0) {
      out.append(text.substr(i, static_cast<size_t>(length)));
      i += static_cast<size_t>(length);
    } else {
      out += "\xEF\xBF\xBD";
      i += static_cast<size_t>(subpart);
      replaced = true;
    }
  }
  return replaced;
}

struct BpeTokenizer::Impl {
  std::string path;
  uint64_t serial = next_tokenizer_serial.fetch_add(1);

  // Vocabulary: each token's bytes (what decode gives), and the ids of byte strings.
  std::vector<std::string> token_bytes;
  std::vector<bool> defined;
  std::unordered_map<std::string, int32_t> id_of_bytes;
  std::array<int32_t, 256> byte_id{};
  PairMap merges;
  bool ignore_merges = false;

  // Added tokens, matched in the raw text before anything else: by first byte, longest first.
  struct Added {
    std::string content;
    int32_t id;
  };
  std::array<std::vector<Added>, 256> added_by_first_byte;
  std::array<bool, 256> added_first_byte{};

  bool nfc = false;
  bool add_prefix_space = false;
  std::vector<std::unique_ptr<Regex>> splits;  // applied in turn, each to the last one's pieces

  std::vector<int32_t> prefix, suffix;
  int32_t bos = -1, eos = -1;

  void parse_model(const json& model);
  void parse_added(const json& added);
  void parse_normalizer(const json& normalizer);
  void parse_pre_tokenizer(const json& pre);
  void parse_post_processor(const json& post);
  void parse_decoder(const json& decoder);
  void set_token(int32_t id, std::string bytes);
  int32_t find_token(const std::string& text) const;

  void encode_text(std::string_view text, ThreadState& state, std::vector<int32_t>& out) const;
  void encode_segment(std::string_view segment, ThreadState& state,
                      std::vector<int32_t>& out) const;
  void split_from(size_t step, std::string_view piece, ThreadState& state,
                  std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, ThreadState& state, std::vector<int32_t>& out) const;
  void merge_short(std::string_view piece, ThreadState& state, std::vector<int32_t>& out) const;
  void merge_long(std::string_view piece, ThreadState& state, std::vector<int32_t>& out) const;
};

namespace {

// A vocabulary entry's bytes: its characters through the byte-to-unicode table, or, when one of
// them is not in it, its own UTF-8 (as Hugging Face's ByteLevel decoder does).
std::string byte_level_bytes(const std::string& token,
                             const std::unordered_map<uint32_t, unsigned char>& byte_of) {
  std::string bytes;
  size_t i = 0;
  while (i < token.size()) {
    const uint32_t cp = next_codepoint(token, i);
    const auto it = byte_of.find(cp);
    if (it == byte_of.end()) return token;
    bytes += static_cast<char>(it->second);
  }
  return bytes;
}

const std::unordered_map<uint32_t, unsigned char>& codepoint_to_byte() {
  static const auto table = [] {
    std::unordered_map<uint32_t, unsigned char> map;
    const auto forward = byte_to_codepoint();
    for (int b = 0; b < 256; ++b) map[forward[b]] = static_cast<unsigned char>(b);
    return map;
  }();
  return table;
}

}  // namespace

namespace {

// A token id as a tokenizer.json gives it. Anything but an integer that fits int32 is refused
// here: converting a float or a larger number to int32 is undefined behaviour (the fuzzer found
// one: 2.48e+110 as a vocabulary id).
int32_t token_id(const json& value, const std::string& path) {
  constexpr int64_t kLargest = std::numeric_limits<int32_t>::max();
  const bool fits = value.is_number_unsigned()
                        ? value.get<uint64_t>() <= static_cast<uint64_t>(kLargest)
                        : value.is_number_integer() && value.get<int64_t>() >= -kLargest &&
                              value.get<int64_t>() <= kLargest;
  if (!fits) throw error(path, ": token id ", value.dump(), " is not an integer id");
  return static_cast<int32_t>(value.get<int64_t>());
}

}  // namespace

void BpeTokenizer::Impl::set_token(int32_t id, std::string bytes) {
  // Ids index arrays: one from a corrupt file must not allocate gigabytes.
  constexpr int32_t kMaxId = 1 << 24;
  if (id < 0 || id >= kMaxId)
    throw error(path, ": token id ", id, " is outside [0, ", kMaxId, "): not a vocabulary");
  if (static_cast<size_t>(id) >= token_bytes.size()) {
    token_bytes.resize(static_cast<size_t>(id) + 1);
    defined.resize(static_cast<size_t>(id) + 1, false);
  }
  token_bytes[id] = std::move(bytes);
  defined[id] = true;
}

void BpeTokenizer::Impl::parse_model(const json& model) {
  const std::string type = model.value("type", "BPE");
  if (type != "BPE")
    throw error(path, ": model type ", type,
                " is not byte-level BPE; boostlm reads BPE "
                "tokenizer.json files and SentencePiece .model files");
  if (model.value("byte_fallback", false))
    throw error(path,
                ": a BPE with byte_fallback is SentencePiece-style; load the model's "
                "tokenizer.model instead");
  for (const char* field : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(field) && !model[field].is_null() && model[field] != "")
      throw error(path, ": model.", field, " is not supported (not a byte-level BPE)");
  }
  ignore_merges = model.value("ignore_merges", false);
  const auto& byte_of = codepoint_to_byte();
  for (const auto& [text, id] : model.at("vocab").items()) {
    std::string bytes = byte_level_bytes(text, byte_of);
    const int32_t token = token_id(id, path);
    id_of_bytes[bytes] = token;
    set_token(token, std::move(bytes));
  }
  const auto forward = byte_to_codepoint();
  for (int b = 0; b < 256; ++b) {
    const auto it = id_of_bytes.find(std::string(1, static_cast<char>(b)));
    if (it == id_of_bytes.end()) {
      std::string name;
      append_utf8(forward[b], name);
      throw error(path, ": the vocabulary has no token for byte ", b, " (", name,
                  "): not a byte-level BPE");
    }
    byte_id[b] = it->second;
  }
  const json& list = model.at("merges");
  merges.reserve(list.size());
  for (size_t rank = 0; rank < list.size(); ++rank) {
    const json& merge = list[rank];
    std::string left, right;
    if (merge.is_array() && merge.size() == 2) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
        throw error(path, ": merge ", rank, " (\"", text, "\") is not two tokens");
      left = text.substr(0, space);
      right = text.substr(space + 1);
    }
    const std::string a = byte_level_bytes(left, byte_of), b = byte_level_bytes(right, byte_of);
    const auto ia = id_of_bytes.find(a), ib = id_of_bytes.find(b), im = id_of_bytes.find(a + b);
    if (ia == id_of_bytes.end() || ib == id_of_bytes.end() || im == id_of_bytes.end())
      throw error(path, ": merge ", rank, " (", left, " ", right,
                  ") names a token missing from the vocabulary");
    merges.put(ia->second, ib->second,
               (static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(im->second));
  }
}

void BpeTokenizer::Impl::parse_added(const json& added) {
  if (added.is_null()) return;
  for (const json& token : added) {
    for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
      if (token.value(flag, false))
        throw error(path, ": added token ", token.at("content").get<std::string>(), " sets ", flag,
                    ", which boostlm does not support");
    }
    const std::string content = token.at("content").get<std::string>();
    const int32_t id = token_id(token.at("id"), path);
    set_token(id, content);
    if (content.empty()) continue;
    added_by_first_byte[static_cast<unsigned char>(content[0])].push_back({content, id});
    added_first_byte[static_cast<unsigned char>(content[0])] = true;
  }
  for (auto& bucket : added_by_first_byte) {
    std::stable_sort(bucket.begin(), bucket.end(), [](const Added& a, const Added& b) {
      return a.content.size() > b.content.size();
    });
  }
}

void BpeTokenizer::Impl::parse_normalizer(const json& normalizer) {
  if (normalizer.is_null()) return;
  const std::string type = normalizer.value("type", "");
  if (type == "NFC") {
    nfc = true;
  } else if (type == "Sequence") {
    for (const json& each : normalizer.at("normalizers")) parse_normalizer(each);
  } else {
    throw error(path, ": normalizer ", type, " is not supported (boostlm supports none and NFC)");
  }
}

void BpeTokenizer::Impl::parse_pre_tokenizer(const json& pre) {
  if (pre.is_null()) return;
  const std::string type = pre.value("type", "");
  if (type == "Sequence") {
    for (const json& each : pre.at("pretokenizers")) parse_pre_tokenizer(each);
  } else if (type == "Split") {
    const std::string behavior = pre.value("behavior", "Isolated");
    if (behavior != "Isolated" || pre.value("invert", false))
      throw error(path, ": Split with behavior ", behavior,
                  pre.value("invert", false) ? " and invert" : "",
                  " is not supported (only Isolated)");
    const json& pattern = pre.at("pattern");
    std::string regex;
    if (pattern.contains("Regex")) {
      regex = translate_pattern(pattern["Regex"].get<std::string>(), path);
    } else {
      regex = "\\Q" + pattern.at("String").get<std::string>() + "\\E";
    }
    splits.push_back(std::make_unique<Regex>(regex, path));
  } else if (type == "Digits") {
    splits.push_back(std::make_unique<Regex>(
        pre.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+", path));
  } else if (type == "ByteLevel") {
    if (pre.value("add_prefix_space", false)) {
      if (!splits.empty())
        throw error(path,
                    ": ByteLevel with add_prefix_space after another pre-tokenizer is "
                    "not supported");
      add_prefix_space = true;
    }
    if (pre.value("use_regex", true))
      splits.push_back(std::make_unique<Regex>(translate_pattern(kGpt2Pattern, path), path));
  } else {
    throw error(path, ": pre-tokenizer ", type,
                " is not supported (boostlm supports Split, "
                "Digits, ByteLevel and Sequence)");
  }
}

void BpeTokenizer::Impl::parse_post_processor(const json& post) {
  if (post.is_null()) return;
  const std::string type = post.value("type", "");
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence") {
    for (const json& each : post.at("processors")) parse_post_processor(each);
  } else if (type == "TemplateProcessing") {
    bool after = false;
    for (const json& item : post.at("single")) {
      if (item.contains("Sequence")) {
        after = true;
        continue;
      }
      const std::string name = item.at("SpecialToken").at("id").get<std::string>();
      for (const json& id : post.at("special_tokens").at(name).at("ids"))
        (after ? suffix : prefix).push_back(token_id(id, path));
    }
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    prefix.push_back(token_id(post.at("cls").at(1), path));
    suffix.push_back(token_id(post.at("sep").at(1), path));
  } else {
    throw error(path, ": post-processor ", type, " is not supported");
  }
}

void BpeTokenizer::Impl::parse_decoder(const json& decoder) {
  if (decoder.is_null()) return;
  const std::string type = decoder.value("type", "");
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    for (const json& each : decoder.at("decoders")) parse_decoder(each);
    return;
  }
  throw error(path, ": decoder ", type, " is not supported (byte-level BPE decodes by ByteLevel)");
}

int32_t BpeTokenizer::Impl::find_token(const std::string& text) const {
  if (text.empty()) return -1;
  for (const Added& added : added_by_first_byte[static_cast<unsigned char>(text[0])]) {
    if (added.content == text) return added.id;
  }
  const auto it = id_of_bytes.find(byte_level_bytes(text, codepoint_to_byte()));
  return it == id_of_bytes.end() ? -1 : it->second;
}

BpeTokenizer::BpeTokenizer(const std::string& path, std::string_view json_text,
                           std::string_view config_json)
    : impl_(std::make_unique<Impl>()) {
  Impl& t = *impl_;
  t.path = path;
  json root;
  try {
    root = json::parse(json_text);
    t.parse_model(root.at("model"));
    t.parse_added(root.value("added_tokens", json()));
    t.parse_normalizer(root.value("normalizer", json()));
    t.parse_pre_tokenizer(root.value("pre_tokenizer", json()));
    t.parse_post_processor(root.value("post_processor", json()));
    t.parse_decoder(root.value("decoder", json()));
  } catch (const json::exception& e) {
    throw error(path, ": not a valid tokenizer.json (", e.what(), ")");
  }
  json config = json::object();
  try {
    if (!config_json.empty()) config = json::parse(config_json);
    // The BOS is the one the post-processor adds; else the config's. The EOS is the config's,
    // else the post-processor's last token, else the usual end-of-text names.
    if (!t.prefix.empty()) t.bos = t.prefix.front();
    if (t.bos < 0 && config.contains("bos_token"))
      t.bos = t.find_token(token_name(config["bos_token"]));
    if (config.contains("eos_token")) t.eos = t.find_token(token_name(config["eos_token"]));
  } catch (const json::exception& e) {
    throw error(path, ": the tokenizer_config.json beside it is not valid (", e.what(), ")");
  }
  if (t.eos < 0 && !t.suffix.empty()) t.eos = t.suffix.back();
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>"}) {
    if (t.eos < 0) t.eos = t.find_token(name);
  }
}

BpeTokenizer::~BpeTokenizer() = default;

const std::vector<int32_t>& BpeTokenizer::prefix_ids() const {
  return impl_->prefix;
}
const std::vector<int32_t>& BpeTokenizer::suffix_ids() const {
  return impl_->suffix;
}
int64_t BpeTokenizer::vocab_size() const {
  return static_cast<int64_t>(impl_->token_bytes.size());
}
int32_t BpeTokenizer::bos_id() const {
  return impl_->bos;
}
int32_t BpeTokenizer::eos_id() const {
  return impl_->eos;
}
bool BpeTokenizer::has_token(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->defined[id];
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  ThreadState& state = thread_state(impl_->serial);
  std::vector<int32_t> out;
  out.reserve(text.size() / 4 + 4);
  if (valid_utf8(text)) {
    impl_->encode_text(text, state, out);
  } else {
    std::string clean;
    sanitize_utf8(text, clean);
    impl_->encode_text(clean, state, out);
  }
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (!has_token(id))
      throw error(impl_->path, ": cannot decode token ", id, ", not in the vocabulary [0, ",
                  vocab_size(), ")");
    out += impl_->token_bytes[id];
  }
  return out;
}

void BpeTokenizer::Impl::encode_text(std::string_view text, ThreadState& state,
                                     std::vector<int32_t>& out) const {
  size_t segment = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto first = static_cast<unsigned char>(text[i]);
    if (!added_first_byte[first]) continue;
    for (const Added& added : added_by_first_byte[first]) {
      if (text.compare(i, added.content.size(), added.content) != 0) continue;
      if (i > segment) encode_segment(text.substr(segment, i - segment), state, out);
      out.push_back(added.id);
      segment = i + added.content.size();
      i = segment - 1;
      break;
    }
  }
  if (segment < text.size()) encode_segment(text.substr(segment), state, out);
}

namespace {

// `segment` in Unicode's Normalization Form C (through ICU); `out` is left empty when it is
// already in it. Text below U+0300 cannot change (nothing there composes or decomposes, and a
// combining mark that could join it is at U+0300 or above, lead byte 0xCC or more).
void to_nfc(std::string_view segment, std::string& out, const std::string& path) {
  out.clear();
  const bool may_change = std::any_of(segment.begin(), segment.end(),
                                      [](char c) { return static_cast<unsigned char>(c) >= 0xCC; });
  if (!may_change) return;
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* normalizer = unorm2_getNFCInstance(&status);
  std::u16string wide(segment.size() + 1, u'\0');
  int32_t wide_length = 0;
  u_strFromUTF8(wide.data(), static_cast<int32_t>(wide.size()), &wide_length, segment.data(),
                static_cast<int32_t>(segment.size()), &status);
  if (U_SUCCESS(status) && unorm2_isNormalized(normalizer, wide.data(), wide_length, &status))
    return;
  std::u16string normal(static_cast<size_t>(wide_length) * 3 + 1, u'\0');
  const int32_t normal_length =
      unorm2_normalize(normalizer, wide.data(), wide_length, normal.data(),
                       static_cast<int32_t>(normal.size()), &status);
  out.assign(static_cast<size_t>(normal_length) * 3 + 1, '\0');
  int32_t bytes = 0;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &bytes, normal.data(), normal_length,
              &status);
  if (U_FAILURE(status)) throw error(path, ": NFC normalization failed: ", u_errorName(status));
  out.resize(static_cast<size_t>(bytes));
}

}  // namespace

void BpeTokenizer::Impl::encode_segment(std::string_view segment, ThreadState& state,
                                        std::vector<int32_t>& out) const {
  if (nfc) {
    to_nfc(segment, state.normalized, path);
    if (!state.normalized.empty()) segment = state.normalized;
  }
  if (add_prefix_space && !segment.empty() && segment[0] != ' ') {
    state.prefixed.assign(" ").append(segment);
    segment = state.prefixed;
  }
  split_from(0, segment, state, out);
}

void BpeTokenizer::Impl::split_from(size_t step, std::string_view piece, ThreadState& state,
                                    std::vector<int32_t>& out) const {
  if (step == splits.size()) return encode_piece(piece, state, out);
  splits[step]->split(piece, state, path, [&](size_t begin, size_t end) {
    split_from(step + 1, piece.substr(begin, end - begin), state, out);
  });
}

void BpeTokenizer::Impl::encode_piece(std::string_view piece, ThreadState& state,
                                      std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_id[static_cast<unsigned char>(piece[0])]);
    return;
  }
  const bool cached = piece.size() <= PieceCache::kMaxPieceBytes;
  const size_t hash = cached ? std::hash<std::string_view>{}(piece) : 0;
  if (cached && state.cache.find(piece, hash, out)) return;
  const size_t before = out.size();
  if (ignore_merges) {
    // Hugging Face looks a whole piece up first when ignore_merges is set (LLaMA 3).
    const auto it = id_of_bytes.find(std::string(piece));
    if (it != id_of_bytes.end()) out.push_back(it->second);
  }
  if (out.size() == before) {
    if (piece.size() <= kShortPiece) {
      merge_short(piece, state, out);
    } else {
      merge_long(piece, state, out);
    }
  }
  if (cached) state.cache.insert(piece, hash, out.data() + before, out.size() - before);
}

// Merges by rank, lowest first and leftmost among equals (Hugging Face's order): a scan for the
// best pair per merge, over arrays that shrink in place. Quadratic, and fastest for words.
void BpeTokenizer::Impl::merge_short(std::string_view piece, ThreadState& state,
                                     std::vector<int32_t>& out) const {
  std::vector<int32_t>& symbols = state.symbols;
  std::vector<uint64_t>& pairs = state.pair_values;  // (rank << 32 | merged id) of i and i+1
  size_t count = piece.size();
  symbols.resize(count);
  pairs.resize(count);
  for (size_t i = 0; i < count; ++i) symbols[i] = byte_id[static_cast<unsigned char>(piece[i])];
  for (size_t i = 0; i + 1 < count; ++i) pairs[i] = merges.get(symbols[i], symbols[i + 1]);
  while (count > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < count; ++i) {
      if (pairs[i] < pairs[best]) best = i;
    }
    if (pairs[best] == kNoMerge) break;
    symbols[best] = static_cast<int32_t>(static_cast<uint32_t>(pairs[best]));
    std::copy(symbols.begin() + best + 2, symbols.begin() + count, symbols.begin() + best + 1);
    if (best + 2 < count)
      std::copy(pairs.begin() + best + 2, pairs.begin() + count - 1, pairs.begin() + best + 1);
    --count;
    if (best > 0) pairs[best - 1] = merges.get(symbols[best - 1], symbols[best]);
    if (best + 1 < count) pairs[best] = merges.get(symbols[best], symbols[best + 1]);
  }
  out.insert(out.end(), symbols.begin(), symbols.begin() + count);
}

// The same order for long pieces (a run of thousands of letters), in O(n log n): candidate
// pairs in a heap by (rank, position), symbols in a linked list, stale candidates skipped.
void BpeTokenizer::Impl::merge_long(std::string_view piece, ThreadState& state,
                                    std::vector<int32_t>& out) const {
  struct Candidate {
    uint64_t value;  // rank << 32 | merged id
    int32_t position, left, right;
    bool operator>(const Candidate& o) const {
      return (value >> 32) != (o.value >> 32) ? (value >> 32) > (o.value >> 32)
                                              : position > o.position;
    }
  };
  const auto count = static_cast<int32_t>(piece.size());
  std::vector<int32_t>& symbols = state.symbols;
  std::vector<int32_t>& prev = state.prev;
  std::vector<int32_t>& next = state.next;
  symbols.resize(piece.size());
  prev.resize(piece.size());
  next.resize(piece.size());
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int32_t position) {
    if (position < 0 || next[position] < 0) return;
    const uint64_t value = merges.get(symbols[position], symbols[next[position]]);
    if (value != kNoMerge) heap.push({value, position, symbols[position], symbols[next[position]]});
  };
  for (int32_t i = 0; i < count; ++i) {
    symbols[i] = byte_id[static_cast<unsigned char>(piece[i])];
    prev[i] = i - 1;
    next[i] = i + 1 < count ? i + 1 : -1;
  }
  for (int32_t i = 0; i + 1 < count; ++i) consider(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t right = next[c.position];
    if (symbols[c.position] != c.left || right < 0 || symbols[right] != c.right) continue;
    symbols[c.position] = static_cast<int32_t>(static_cast<uint32_t>(c.value));
    symbols[right] = -1;  // gone: no candidate names it again
    next[c.position] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.position;
    consider(prev[c.position]);
    consider(c.position);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(symbols[i]);
}

}  // namespace boostlm
