// Hugging Face tokenizer.json files (data/bpe.h) and the text they encode. The first byte picks:
// even, the rest is a tokenizer.json, which must load or be refused with an Error, and a loaded
// one must encode and decode a fixed text; odd, the rest is text for a small fixed byte-level BPE
// (GPT-2's pattern, merges, an added token), and decoding its ids must give the text back, with
// ill-formed UTF-8 replaced (sanitize_utf8).
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/bpe.h"
#include "fuzz_util.h"

namespace {

const boostlm::BpeTokenizer& fixed_tokenizer() {
  static const boostlm::BpeTokenizer tokenizer = [] {
    nlohmann::json vocab = nlohmann::json::object();
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool kept = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      const int cp = kept ? b : next++;
      std::string utf8;
      if (cp < 0x80) {
        utf8 += static_cast<char>(cp);
      } else {
        utf8 += static_cast<char>(0xC0 | (cp >> 6));
        utf8 += static_cast<char>(0x80 | (cp & 0x3F));
      }
      vocab[utf8] = b;
    }
    const std::vector<std::string> merges = {"Ġ t", "h e", "Ġt he", "a a", "aa aa", "e r"};
    next = 256;
    for (const std::string& merge : merges) {
      const size_t space = merge.find(' ');
      vocab[merge.substr(0, space) + merge.substr(space + 1)] = next++;
    }
    const nlohmann::json json = {
        {"added_tokens", {{{"id", 300}, {"content", "<|x|>"}, {"special", true}}}},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"use_regex", true}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
    return boostlm::BpeTokenizer("fixed/tokenizer.json", json.dump(), "");
  }();
  return tokenizer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace boostlm;
  if (size == 0) return 0;
  const std::string_view rest = text_of(data + 1, size - 1);
  if (data[0] % 2 == 0) {
    try {
      const BpeTokenizer tokenizer("fuzz/tokenizer.json", rest, "");
      const std::vector<int32_t> ids = tokenizer.encode("Hello world 123 <|x|> naïve \xff!");
      tokenizer.decode(ids);
    } catch (const Error&) {
    }
    return 0;
  }
  const BpeTokenizer& tokenizer = fixed_tokenizer();
  std::string expected;
  sanitize_utf8(rest, expected);
  FUZZ_CHECK(tokenizer.decode(tokenizer.encode(rest)) == expected);
  return 0;
}
