#include "train/gguf_vocab.h"

#include <sentencepiece_processor.h>

#include <cstring>
#include <filesystem>
#include <string_view>

#include "core/error.h"
#include "core/file_io.h"

namespace boostlm {

namespace {

// The protobuf wire format, as far as sentencepiece_model.proto uses it: varints (wire type 0),
// fixed 64-bit (1), length-delimited (2) and fixed 32-bit (5) fields.
class ProtoReader {
 public:
  ProtoReader(std::string_view bytes, const std::string& file) : bytes_(bytes), file_(file) {}
  bool done() const { return pos_ >= bytes_.size(); }

  // The next field's number and wire type.
  std::pair<uint32_t, uint32_t> key() {
    const uint64_t k = varint();
    return {static_cast<uint32_t>(k >> 3), static_cast<uint32_t>(k & 7)};
  }
  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const auto byte = static_cast<unsigned char>(take(1)[0]);
      value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return value;
    }
    throw corrupt();
  }
  std::string_view length_delimited() { return take(varint()); }
  float fixed32_float() {
    float value;
    std::memcpy(&value, take(4).data(), 4);
    return value;
  }
  void skip(uint32_t wire_type) {
    switch (wire_type) {
      case 0:
        varint();
        return;
      case 1:
        take(8);
        return;
      case 2:
        length_delimited();
        return;
      case 5:
        take(4);
        return;
      default:
        throw corrupt();
    }
  }

 private:
  std::string_view take(uint64_t n) {
    if (n > bytes_.size() - pos_) throw corrupt();
    const std::string_view out = bytes_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  Error corrupt() const {
    return error(file_, ": not a SentencePiece model (its protobuf ends or breaks mid-field)");
  }

  std::string_view bytes_;
  size_t pos_ = 0;
  const std::string& file_;
};

struct ProtoPiece {
  std::string piece;
  float score = 0.0f;
  int32_t type = static_cast<int32_t>(PieceType::normal);
};

ProtoPiece read_piece(std::string_view bytes, const std::string& file) {
  ProtoPiece p;
  ProtoReader r(bytes, file);
  while (!r.done()) {
    const auto [field, wire] = r.key();
    if (field == 1 && wire == 2)
      p.piece = std::string(r.length_delimited());
    else if (field == 2 && wire == 5)
      p.score = r.fixed32_float();
    else if (field == 3 && wire == 0)
      p.type = static_cast<int32_t>(r.varint());
    else
      r.skip(wire);
  }
  return p;
}

void read_normalizer(std::string_view bytes, const std::string& file, SentencePieceVocab& v) {
  ProtoReader r(bytes, file);
  while (!r.done()) {
    const auto [field, wire] = r.key();
    if (field == 3 && wire == 0)
      v.add_dummy_prefix = r.varint() != 0;
    else if (field == 4 && wire == 0)
      v.remove_extra_whitespaces = r.varint() != 0;
    else
      r.skip(wire);
  }
}

std::string read_model_type(std::string_view bytes, const std::string& file) {
  static const char* const names[] = {"?", "unigram", "bpe", "word", "char"};
  std::string type = "unigram";  // TrainerSpec's default
  ProtoReader r(bytes, file);
  while (!r.done()) {
    const auto [field, wire] = r.key();
    if (field == 3 && wire == 0) {
      const uint64_t t = r.varint();
      type = t >= 1 && t <= 4 ? names[t] : "unknown (" + std::to_string(t) + ")";
    } else {
      r.skip(wire);
    }
  }
  return type;
}

}  // namespace

SentencePieceVocab read_sentencepiece_vocab(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) throw error(path, ": tokenizer model not found");
  sentencepiece::SentencePieceProcessor processor;
  const auto status = processor.Load(path);
  if (!status.ok())
    throw error(path, ": not a valid SentencePiece model (", status.ToString(), ")");

  const std::string bytes = read_text_file(path);
  SentencePieceVocab v;
  std::vector<ProtoPiece> pieces;
  ProtoReader r(bytes, path);
  while (!r.done()) {
    const auto [field, wire] = r.key();
    if (field == 1 && wire == 2)
      pieces.push_back(read_piece(r.length_delimited(), path));
    else if (field == 2 && wire == 2)
      v.model_type = read_model_type(r.length_delimited(), path);
    else if (field == 3 && wire == 2)
      read_normalizer(r.length_delimited(), path, v);
    else
      r.skip(wire);
  }

  // The library and the protobuf must agree on every piece: a reading of the wrong fields would
  // not.
  const int n = processor.GetPieceSize();
  if (static_cast<size_t>(n) != pieces.size())
    throw error(path, ": the sentencepiece library reads ", n, " pieces, its protobuf ",
                pieces.size());
  for (int i = 0; i < n; ++i) {
    const ProtoPiece& p = pieces[i];
    const bool same_type =
        (p.type == static_cast<int32_t>(PieceType::unknown)) == processor.IsUnknown(i) &&
        (p.type == static_cast<int32_t>(PieceType::control)) == processor.IsControl(i) &&
        (p.type == static_cast<int32_t>(PieceType::byte)) == processor.IsByte(i);
    if (processor.IdToPiece(i) != p.piece || processor.GetScore(i) != p.score || !same_type)
      throw error(path, ": piece ", i, " reads differently through the sentencepiece library and ",
                  "its protobuf");
    v.pieces.push_back(p.piece);
    v.scores.push_back(p.score);
    v.types.push_back(p.type);
  }
  v.bos_id = processor.bos_id();
  v.eos_id = processor.eos_id();
  v.unk_id = processor.unk_id();
  v.pad_id = processor.pad_id();
  return v;
}

}  // namespace boostlm
