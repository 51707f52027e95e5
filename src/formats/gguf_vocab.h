// Tokenizers as GGUF holds them (tokenizer.ggml.*). A SentencePiece model as the `llama`
// tokenizer: every piece with its score and type, the special ids, and the normalizer switches
// llama.cpp's tokenizer follows (a leading space added, runs of spaces squeezed). A Hugging Face
// byte-level BPE (tokenizer.json) as the `gpt2` tokenizer: its token strings, merges, the name
// llama.cpp knows its pre-tokenizer by, and the special ids.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace boostlm {

// SentencePiece's piece types, which are GGUF's token_type values too (docs/gguf.md).
enum class PieceType : int32_t {
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6
};

struct SentencePieceVocab {
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<int32_t> types;                               // PieceType values
  int32_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;  // TrainerSpec defaults; -1: none
  bool add_dummy_prefix = true;                             // NormalizerSpec defaults
  bool remove_extra_whitespaces = true;
  std::string model_type = "unigram";  // TrainerSpec.model_type: unigram, bpe, word, char
};

// The protobuf of a SentencePiece model file (sentencepiece_model.proto): ModelProto.pieces = 1
// {piece = 1, score = 2, type = 3}, trainer_spec = 2 {model_type = 3, unk_id = 40, bos_id = 41,
// eos_id = 42, pad_id = 43}, normalizer_spec = 3 {add_dummy_prefix = 3,
// remove_extra_whitespaces = 4}; every other field skipped. Throws Error naming `source` when the
// bytes break off mid-field.
SentencePieceVocab parse_sentencepiece_model(std::string_view bytes, const std::string& source);

// Reads `path` (a tokenizer.model): loaded by the sentencepiece library (which refuses anything
// that is not a model), read by parse_sentencepiece_model, and the two readings checked to agree
// on every piece, score, special id and (where the library says) type. Throws Error naming the
// file.
SentencePieceVocab read_sentencepiece_vocab(const std::string& path);

// A byte-level BPE as GGUF's `gpt2` tokenizer holds it, in llama.cpp's conventions (its
// convert_hf_to_gguf.py and llama-vocab.cpp).
struct ByteLevelBpeVocab {
  // By id, over [0, the largest id + 1): a vocabulary entry's byte-level string (GPT-2's
  // byte-to-unicode characters) typed normal, an added token's content typed control (special)
  // or user_defined (not), and "[PADi]" typed unused where no token has id i.
  std::vector<std::string> tokens;
  std::vector<int32_t> types;       // PieceType values
  std::vector<std::string> merges;  // "left right", in rank order
  // llama.cpp's name for the pre-tokenizer (tokenizer.ggml.pre): "gpt-2" for GPT-2's pattern,
  // "llama-bpe" for LLaMA 3's.
  std::string pre;
  bool ignore_merges = false;         // model.ignore_merges: a piece that is a token is not merged
  bool llama_ignores_merges = false;  // what llama.cpp assumes for `pre`
  int32_t bos_id = -1, eos_id = -1;   // as boostlm's tokenizer names them; -1: none
  bool add_bos = false, add_eos = false;  // the post-processor puts BOS before / EOS after
};

// Reads `path` (a tokenizer.json, with the tokenizer_config.json beside it for BOS and EOS):
// loaded by boostlm's tokenizer (which refuses what it cannot reproduce), its vocabulary, added
// tokens and merges read from the JSON and checked against that tokenizer. Throws Error naming
// the file for a normalizer, a pre-tokenizer pattern llama.cpp has no name for, or a
// post-processor llama.cpp cannot follow.
ByteLevelBpeVocab read_byte_level_bpe_vocab(const std::string& path);

}  // namespace boostlm
