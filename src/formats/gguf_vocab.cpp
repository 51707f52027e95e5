#include "formats/gguf_vocab.h"

#include <sentencepiece_processor.h>

#include <filesystem>

#include "core/error.h"
#include "core/file_io.h"

namespace boostlm {

SentencePieceVocab read_sentencepiece_vocab(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) throw error(path, ": tokenizer model not found");
  sentencepiece::SentencePieceProcessor processor;
  const auto status = processor.Load(path);
  if (!status.ok())
    throw error(path, ": not a valid SentencePiece model (", status.ToString(), ")");
  const SentencePieceVocab v = parse_sentencepiece_model(read_text_file(path), path);

  // The library and the protobuf reading must agree on every piece and special id: a reading of
  // the wrong fields would not.
  const int n = processor.GetPieceSize();
  if (static_cast<size_t>(n) != v.pieces.size())
    throw error(path, ": the sentencepiece library reads ", n, " pieces, its protobuf ",
                v.pieces.size());
  auto is = [&](int i, PieceType type) { return v.types[i] == static_cast<int32_t>(type); };
  for (int i = 0; i < n; ++i) {
    const bool same_type = is(i, PieceType::unknown) == processor.IsUnknown(i) &&
                           is(i, PieceType::control) == processor.IsControl(i) &&
                           is(i, PieceType::byte) == processor.IsByte(i);
    if (processor.IdToPiece(i) != v.pieces[i] || processor.GetScore(i) != v.scores[i] || !same_type)
      throw error(path, ": piece ", i, " reads differently through the sentencepiece library and ",
                  "its protobuf");
  }
  if (processor.bos_id() != v.bos_id || processor.eos_id() != v.eos_id ||
      processor.unk_id() != v.unk_id || processor.pad_id() != v.pad_id)
    throw error(path, ": its special ids read differently through the sentencepiece library and ",
                "its protobuf");
  return v;
}

}  // namespace boostlm
