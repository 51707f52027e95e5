// SentencePiece model files (tokenizer.model) as `convert --to-gguf` reads their protobuf.
#include "core/error.h"
#include "formats/gguf_vocab.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace boostlm;
  try {
    const SentencePieceVocab v = parse_sentencepiece_model(text_of(data, size), "tokenizer.model");
    FUZZ_CHECK(v.pieces.size() == v.scores.size() && v.pieces.size() == v.types.size());
    FUZZ_CHECK(v.pieces.size() <= size);  // every piece takes at least one byte
  } catch (const Error&) {
  }
  return 0;
}
