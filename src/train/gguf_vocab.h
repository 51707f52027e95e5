// A SentencePiece model's vocabulary as GGUF's `llama` tokenizer holds it (tokenizer.ggml.*):
// every piece with its score and type, the special ids, and the normalizer switches llama.cpp's
// tokenizer follows (a leading space added, runs of spaces squeezed).
#pragma once

#include <cstdint>
#include <string>
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
  std::vector<int32_t> types;                                  // PieceType values
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;  // -1: none
  bool add_dummy_prefix = true;                                // NormalizerSpec defaults
  bool remove_extra_whitespaces = true;
  std::string model_type = "unigram";  // TrainerSpec.model_type: unigram, bpe, word, char
};

// Reads `path` (a tokenizer.model): pieces, scores, special ids through the sentencepiece
// library; piece types, the normalizer's switches and the model type from the file's protobuf
// (sentencepiece_model.proto: ModelProto.pieces = 1 {piece = 1, score = 2, type = 3},
// trainer_spec = 2 {model_type = 3}, normalizer_spec = 3 {add_dummy_prefix = 3,
// remove_extra_whitespaces = 4}), checked against the library's view. Throws Error naming the
// file when it is not a SentencePiece model.
SentencePieceVocab read_sentencepiece_vocab(const std::string& path);

}  // namespace boostlm
