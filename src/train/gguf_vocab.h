// A SentencePiece model's vocabulary as GGUF's `llama` tokenizer holds it (tokenizer.ggml.*):
// every piece with its score and type, the special ids, and the normalizer switches llama.cpp's
// tokenizer follows (a leading space added, runs of spaces squeezed).
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

}  // namespace boostlm
