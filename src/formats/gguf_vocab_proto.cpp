// parse_sentencepiece_model: a protobuf reader of its own, so that the fuzz targets (tests/fuzz)
// can exercise it without the sentencepiece library.
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "formats/gguf_vocab.h"

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

int32_t read_special_id(uint64_t varint) {
  return static_cast<int32_t>(static_cast<uint32_t>(varint));  // int32 -1 is a 10-byte varint
}

void read_trainer_spec(std::string_view bytes, const std::string& file, SentencePieceVocab& v) {
  static const char* const names[] = {"?", "unigram", "bpe", "word", "char"};
  ProtoReader r(bytes, file);
  while (!r.done()) {
    const auto [field, wire] = r.key();
    if (field == 3 && wire == 0) {
      const uint64_t t = r.varint();
      v.model_type = t >= 1 && t <= 4 ? names[t] : "unknown (" + std::to_string(t) + ")";
    } else if (field == 40 && wire == 0) {
      v.unk_id = read_special_id(r.varint());
    } else if (field == 41 && wire == 0) {
      v.bos_id = read_special_id(r.varint());
    } else if (field == 42 && wire == 0) {
      v.eos_id = read_special_id(r.varint());
    } else if (field == 43 && wire == 0) {
      v.pad_id = read_special_id(r.varint());
    } else {
      r.skip(wire);
    }
  }
}

}  // namespace

SentencePieceVocab parse_sentencepiece_model(std::string_view bytes, const std::string& source) {
  SentencePieceVocab v;
  ProtoReader r(bytes, source);
  while (!r.done()) {
    const auto [field, wire] = r.key();
    if (field == 1 && wire == 2) {
      const ProtoPiece p = read_piece(r.length_delimited(), source);
      v.pieces.push_back(p.piece);
      v.scores.push_back(p.score);
      v.types.push_back(p.type);
    } else if (field == 2 && wire == 2) {
      read_trainer_spec(r.length_delimited(), source, v);
    } else if (field == 3 && wire == 2) {
      read_normalizer(r.length_delimited(), source, v);
    } else {
      r.skip(wire);
    }
  }
  return v;
}

}  // namespace boostlm
