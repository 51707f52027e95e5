// Tokenizers: SentencePiece models (loading, encoding, decoding, and training a byte-fallback BPE
// model) and Hugging Face byte-level BPE tokenizer.json files (data/bpe.h), behind one class.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace boostlm {

class BpeTokenizer;

struct TokenizerTrainOptions {
  // Lines sampled for training when the input has more (a deterministic sample from `seed`):
  // BPE training time grows with the text, and this many lines already pin down the merges.
  int64_t max_sentences = 1'000'000;
  uint64_t seed = 1337;
  int num_threads = 2;
};

class Tokenizer {
 public:
  // Loads a SentencePiece .model or a Hugging Face tokenizer.json, told apart by content (JSON
  // starts with '{'), or the one in a directory (find_tokenizer). A tokenizer.json reads the
  // tokenizer_config.json beside it, if any, for its BOS and EOS. Throws Error naming the file
  // if it is missing, corrupt or of a kind boostlm cannot reproduce exactly.
  static Tokenizer load(const std::string& path);

  // Trains a BPE model on the lines of `input_files` and writes `<model_prefix>.model`, which it
  // returns. Text is kept as is (no normalisation) and unknown characters fall back to bytes, so
  // decode(encode(s)) == s for any UTF-8 `s`. Deterministic for given inputs and options.
  static std::string train(const std::vector<std::string>& input_files,
                           const std::string& model_prefix, int vocab_size,
                           const TokenizerTrainOptions& options = {});

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // The ids of `text`, without BOS or EOS. Safe to call from several threads at once. A
  // tokenizer.json first replaces ill-formed UTF-8 (one U+FFFD per maximal subpart). A
  // SentencePiece model whose pieces never span a word boundary (see splits_at_spaces) encodes
  // a long text in pieces of about kSentencePieceChunkBytes cut at single spaces, with the same
  // ids: SentencePiece's encoder holds the whole text's symbols and merge candidates at once, so
  // one 53 MB line took 89.9 s and 5.3 GB, the same text in lines 17.7 s (prepare --threads 1).
  std::vector<int32_t> encode(std::string_view text) const;
  static constexpr size_t kSentencePieceChunkBytes = 32 << 10;
  // Whether encode() may cut a SentencePiece model's input at single spaces: every piece holds
  // the word-boundary mark U+2581 only as its first character (or is made of it alone), and the
  // model writes a space as that mark at the start of a word with a dummy prefix, so that the
  // ids of "x y" are those of "x" followed by those of "y". False for a tokenizer.json.
  bool splits_at_spaces() const { return splits_at_spaces_; }
  std::string decode(const std::vector<int32_t>& ids) const;

  int64_t vocab_size() const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  const std::string& path() const { return path_; }
  // The byte-level BPE of a tokenizer.json; null for a SentencePiece model.
  const BpeTokenizer* bpe() const { return bpe_.get(); }

 private:
  explicit Tokenizer(std::string path);

  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;  // one of these two
  std::unique_ptr<BpeTokenizer> bpe_;
  std::string path_;
  bool splits_at_spaces_ = false;
  std::vector<int32_t> encode_whole(std::string_view text) const;
};

// The tokenizer in directory `dir` (a checkpoint, prepared data, a Hugging Face model):
// tokenizer.model if there is one, else tokenizer.json; "" when neither.
std::string find_tokenizer(const std::string& dir);

// The name a copy of the tokenizer file `path` takes in a directory: tokenizer.json for a
// tokenizer.json (by content), else tokenizer.model.
std::string tokenizer_file_name(const std::string& path);

// Which tokenizer gave a set of token ids: the checksum of its model file's bytes (Checksum64, as
// checkpoints' checksums.json records every file) and where it was found, for messages. Two
// tokenizers of one vocabulary size give the same ids different meanings; nothing else about the
// tokens tells them apart.
struct TokenizerIdentity {
  std::string hash;  // 16 hex digits; empty: not recorded (data or a checkpoint from before)
  std::string name;  // the model file, or what the hash was read from

  bool known() const { return !hash.empty(); }
  std::string describe() const;  // "data/mine/tokenizer.model (hash 1a2b3c4d5e6f)"
};

// The identity of a tokenizer file (.model or tokenizer.json: the checksum of its bytes), or of
// the one in a directory (find_tokenizer); unknown (empty hash) when there is no such file.
TokenizerIdentity tokenizer_identity(const std::string& model_path);

// Tokens of `data` about to meet a model trained on tokens of `model` (`action` says how, as a
// flag: "--init-from", "eval"). Throws Error naming both when both are known and differ, unless
// `allow` (--allow-tokenizer-change), which returns the warning to print instead. Returns "" when
// they agree or either is unknown.
std::string check_same_tokenizer(const TokenizerIdentity& model, const TokenizerIdentity& data,
                                 bool allow, const std::string& action);

}  // namespace boostlm
