#include "data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <unordered_map>

#include "core/error.h"
#include "core/file_io.h"
#include "core/rng.h"
#include "data/bpe.h"
#include "data/shuffle.h"

namespace boostlm {
namespace {

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\f\v") == std::string_view::npos;
}

// SentencePiece trains on "sentences"; ours are the non-blank lines of the inputs.
std::vector<std::string> read_training_lines(const std::vector<std::string>& input_files) {
  if (input_files.empty()) throw error("tokenizer training: no input files given");
  std::vector<std::string> lines;
  for (const std::string& path : input_files) {
    std::ifstream in(path);
    if (!in) throw error(path, ": cannot open tokenizer training input");
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!is_blank(line)) lines.push_back(std::move(line));
    }
  }
  if (lines.empty()) throw error("tokenizer training: the input files contain no text");
  return lines;
}

// Keeps `count` lines chosen by a seeded shuffle, in their original order. SentencePiece's own
// sampling draws a fresh seed every run unless a process-wide seed is set, so we sample here.
std::vector<std::string> sample_lines(std::vector<std::string> lines, int64_t count,
                                      uint64_t seed) {
  const auto total = static_cast<int64_t>(lines.size());
  if (count <= 0 || total <= count) return lines;
  Rng rng(seed);
  std::vector<int64_t> order = shuffled_indices(total, rng);
  order.resize(static_cast<size_t>(count));
  std::sort(order.begin(), order.end());
  std::vector<std::string> kept;
  kept.reserve(order.size());
  for (int64_t index : order) kept.push_back(std::move(lines[index]));
  return kept;
}

class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string>& lines) : lines_(lines) {}
  bool done() const override { return next_ >= lines_.size(); }
  void Next() override { ++next_; }
  const std::string& value() const override { return lines_[next_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& lines_;
  size_t next_ = 0;
};

std::unordered_map<std::string, std::string> trainer_arguments(int vocab_size,
                                                               const TokenizerTrainOptions& o) {
  return {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(vocab_size)},
      // Bytes for anything unseen, and no normalisation or whitespace squeezing, so that every
      // UTF-8 string survives encode/decode unchanged.
      {"byte_fallback", "true"},
      {"character_coverage", "1.0"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"split_digits", "true"},
      {"num_threads", std::to_string(o.num_threads)},
      {"input_sentence_size", "0"},  // we sample ourselves (sample_lines)
      {"shuffle_input_sentence", "false"},
      {"max_sentence_length", "65536"},  // bytes; longer lines are skipped by the trainer
      {"minloglevel", "2"},              // warnings and errors only
  };
}

}  // namespace

Tokenizer::Tokenizer(std::string path) : path_(std::move(path)) {}

namespace {

bool looks_like_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char c = 0;
  while (in.get(c) && (c == ' ' || c == '\n' || c == '\r' || c == '\t')) {
  }
  return in && c == '{';
}

}  // namespace

std::string find_tokenizer(const std::string& dir) {
  for (const char* name : {"tokenizer.model", "tokenizer.json"}) {
    const std::filesystem::path file = std::filesystem::path(dir) / name;
    if (std::filesystem::is_regular_file(file)) return file.string();
  }
  return "";
}

std::string tokenizer_file_name(const std::string& path) {
  return looks_like_json(path) ? "tokenizer.json" : "tokenizer.model";
}

std::string TokenizerIdentity::describe() const {
  return name + " (hash " + hash.substr(0, 12) + ")";
}

TokenizerIdentity tokenizer_identity(const std::string& path) {
  const std::string model_path = std::filesystem::is_directory(path) ? find_tokenizer(path) : path;
  if (model_path.empty() || !std::filesystem::exists(model_path)) return {};
  const std::string bytes = read_text_file(model_path);
  return {Checksum64::hex(Checksum64::of(bytes.data(), bytes.size())), model_path};
}

std::string check_same_tokenizer(const TokenizerIdentity& model, const TokenizerIdentity& data,
                                 bool allow, const std::string& action) {
  if (!model.known() || !data.known() || model.hash == data.hash) return "";
  if (allow)
    return "--allow-tokenizer-change: " + action + " uses tokens of " + data.describe() +
           " with a model trained on tokens of " + model.describe() +
           ", another tokenizer: the same ids stand for different text";
  throw error(action, ": the model was trained on tokens of ", model.describe(),
              " but the data was prepared with ", data.describe(),
              ", another tokenizer: the same ids stand for different text. Prepare the data with "
              "the model's tokenizer (boostlm prepare --tokenizer ",
              model.name, "), or give --allow-tokenizer-change to go on deliberately");
}

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

namespace {

constexpr std::string_view kWordMark = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// Whether cutting a text at a single space (between two printable ASCII characters) and encoding
// the parts leaves the ids unchanged. It does when no piece can span the space: every piece holds
// U+2581 only at its start, or is a run of it alone (a run cannot reach across a single space);
// and the model writes " y" inside a text as U+2581 y, and a text "y" as U+2581 y too (the dummy
// prefix), with no mark at the end (not treat_whitespace_as_suffix). The normaliser's flags are
// not in SentencePiece's public headers, so the second part is read off the model's own output.
bool pieces_stop_at_spaces(const sentencepiece::SentencePieceProcessor& processor) {
  for (int id = 0; id < processor.GetPieceSize(); ++id) {
    if (processor.IsControl(id) || processor.IsUnknown(id) || processor.IsByte(id)) continue;
    const std::string& piece = processor.IdToPiece(id);
    const size_t mark = piece.find(kWordMark, 1);
    if (mark == std::string::npos) continue;
    for (size_t i = 0; i < piece.size(); i += kWordMark.size())
      if (piece.compare(i, kWordMark.size(), kWordMark) != 0) return false;  // x▁y or ▁x▁
  }
  std::vector<std::string> pieces;
  if (!processor.Encode("ab cd", &pieces).ok()) return false;
  std::string joined;
  for (const std::string& piece : pieces) joined += piece;
  if (joined != std::string(kWordMark) + "ab" + std::string(kWordMark) + "cd") return false;
  std::vector<int> whole, first, second;
  return processor.Encode("ab cd", &whole).ok() && processor.Encode("ab", &first).ok() &&
         processor.Encode("cd", &second).ok() && first.size() + second.size() == whole.size() &&
         std::equal(first.begin(), first.end(), whole.begin()) &&
         std::equal(second.begin(), second.end(), whole.begin() + first.size());
}

bool printable_ascii(char c) { return c > ' ' && c < 0x7F; }

// Where to cut `text` after `begin`: a single space at least half a chunk on, between printable
// ASCII characters, nearest below begin + chunk, else the first above it; text.size() if none.
size_t next_cut(std::string_view text, size_t begin, size_t chunk) {
  if (text.size() - begin <= chunk) return text.size();
  auto cut_at = [&](size_t i) {
    return text[i] == ' ' && printable_ascii(text[i - 1]) && i + 1 < text.size() &&
           printable_ascii(text[i + 1]);
  };
  for (size_t i = begin + chunk; i > begin + chunk / 2; --i)
    if (cut_at(i)) return i;
  for (size_t i = begin + chunk + 1; i + 1 < text.size(); ++i)
    if (cut_at(i)) return i;
  return text.size();
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& given) {
  std::string path = given;
  if (std::filesystem::is_directory(given)) {
    path = find_tokenizer(given);
    if (path.empty())
      throw error(given, ": no tokenizer.model or tokenizer.json in this directory");
  }
  if (!std::filesystem::is_regular_file(path)) {
    throw error(path, ": tokenizer model not found");
  }
  Tokenizer tokenizer(path);
  if (looks_like_json(path)) {
    const std::filesystem::path config =
        std::filesystem::path(path).parent_path() / "tokenizer_config.json";
    const std::string config_text =
        std::filesystem::is_regular_file(config) ? read_text_file(config.string()) : "";
    tokenizer.bpe_ = std::make_unique<BpeTokenizer>(path, read_text_file(path), config_text);
    return tokenizer;
  }
  auto processor = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = processor->Load(path);
  if (!status.ok()) {
    throw error(path, ": not a valid SentencePiece model (", status.ToString(),
                "); boostlm reads SentencePiece .model files and Hugging Face tokenizer.json");
  }
  tokenizer.processor_ = std::move(processor);
  tokenizer.splits_at_spaces_ = pieces_stop_at_spaces(*tokenizer.processor_);
  return tokenizer;
}

namespace {

// SentencePiece's messages name its own flags (vocab_size, character_coverage...); say what to
// change in terms of the options `boostlm prepare` has.
Error training_error(const std::string& status, const std::string& model, int vocab_size) {
  const std::string prefix = "tokenizer training for " + model + " failed: ";
  // "Vocabulary size too high (8192). Please set it to a value <= 1234."
  const size_t high = status.find("Vocabulary size too high");
  if (high != std::string::npos) {
    const size_t le = status.find("<=", high);
    std::string limit = le == std::string::npos ? "" : status.substr(le + 2);
    limit = limit.substr(0, limit.find_first_not_of(" 0123456789"));
    return error(prefix, "the inputs are too small for a vocabulary of ", vocab_size,
                 " tokens (at most", limit.empty() ? " fewer" : limit, "): give --vocab-size",
                 limit.empty() ? " a smaller value" : limit, " or less, or more text");
  }
  // "Vocabulary size is smaller than required_chars. 100 vs 300."
  const size_t small = status.find("smaller than required_chars");
  if (small != std::string::npos) {
    const size_t vs = status.find(" vs ", small);
    std::string chars = vs == std::string::npos ? "" : status.substr(vs + 4);
    chars = chars.substr(0, chars.find_first_not_of("0123456789"));
    return error(prefix, "the inputs hold ", chars.empty() ? "more" : chars,
                 " distinct characters, more than a vocabulary of ", vocab_size,
                 " tokens can hold: give --vocab-size ", chars.empty() ? "a larger value" : chars,
                 " or more");
  }
  return error(prefix, "sentencepiece: ", status,
               " (check the inputs are UTF-8 text, or try another --vocab-size)");
}

}  // namespace

std::string Tokenizer::train(const std::vector<std::string>& input_files,
                             const std::string& model_prefix, int vocab_size,
                             const TokenizerTrainOptions& options) {
  const std::vector<std::string> lines =
      sample_lines(read_training_lines(input_files), options.max_sentences, options.seed);
  LineIterator iterator(lines);
  std::string model_bytes;
  sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned int>(options.seed));
  const auto status = sentencepiece::SentencePieceTrainer::Train(
      trainer_arguments(vocab_size, options), &iterator, &model_bytes);
  if (!status.ok()) throw training_error(status.ToString(), model_prefix + ".model", vocab_size);
  const std::string model_path = model_prefix + ".model";
  write_file_atomically(model_path, model_bytes);
  return model_path;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  if (bpe_) return bpe_->encode(text);
  if (!splits_at_spaces_ || text.size() <= kSentencePieceChunkBytes) return encode_whole(text);
  std::vector<int32_t> ids;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = next_cut(text, begin, kSentencePieceChunkBytes);
    const std::vector<int32_t> part = encode_whole(text.substr(begin, end - begin));
    ids.insert(ids.end(), part.begin(), part.end());
    begin = end + 1;  // the space, which the next part's dummy prefix writes
  }
  return ids;
}

std::vector<int32_t> Tokenizer::encode_whole(std::string_view text) const {
  std::vector<int> ids;
  const auto status = processor_->Encode(text, &ids);
  if (!status.ok()) throw error(path_, ": encode failed: ", status.ToString());
  return {ids.begin(), ids.end()};
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  if (bpe_) return bpe_->decode(ids);
  const int64_t vocab = vocab_size();
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) {
      throw error(path_, ": cannot decode token ", id, ", outside the vocabulary [0, ", vocab, ")");
    }
  }
  std::string text;
  const auto status = processor_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  if (!status.ok()) throw error(path_, ": decode failed: ", status.ToString());
  return text;
}

int64_t Tokenizer::vocab_size() const {
  return bpe_ ? bpe_->vocab_size() : processor_->GetPieceSize();
}
int32_t Tokenizer::bos_id() const {
  return bpe_ ? bpe_->bos_id() : processor_->bos_id();
}
int32_t Tokenizer::eos_id() const {
  return bpe_ ? bpe_->eos_id() : processor_->eos_id();
}

}  // namespace boostlm
