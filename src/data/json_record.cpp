#include "data/json_record.h"

#include <cstdint>
#include <cstring>

namespace boostlm {
namespace {

// Deeper nesting is refused rather than recursed into (a record is one line of a corpus; no real
// one comes near this).
constexpr int kMaxDepth = 512;

constexpr uint64_t kOnes = 0x0101010101010101ull;
constexpr uint64_t kHighs = 0x8080808080808080ull;

// Whether any of the 8 bytes of `word` ends a run of plain string bytes: a quote, a backslash, a
// control byte or a byte of a multi-byte UTF-8 sequence. May say yes for a byte after such a
// byte (the caller then looks byte by byte), never no when one is there.
bool has_special_byte(uint64_t word) {
  auto has_zero = [](uint64_t x) { return (x - kOnes) & ~x & kHighs; };
  const uint64_t below_space = (word - kOnes * 0x20) & ~word & kHighs;
  return (below_space | has_zero(word ^ (kOnes * '"')) | has_zero(word ^ (kOnes * '\\')) |
          (word & kHighs)) != 0;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_utf8(uint32_t code_point, std::string* out) {
  if (code_point < 0x80) {
    out->push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

class Scanner {
 public:
  explicit Scanner(std::string_view text) : begin_(text.data()), p_(begin_), end_(begin_ + text.size()) {
    if (end_ - p_ >= 3 && std::memcmp(p_, "\xEF\xBB\xBF", 3) == 0) p_ += 3;  // a BOM, as nlohmann
  }

  // The record as described in json_record.h.
  JsonFieldResult field(std::string_view name, std::string* text) {
    skip_space();
    if (p_ == end_ || *p_ != '{') {
      if (!value(0)) return failure();
      skip_space();
      if (p_ != end_) return fail("text after the JSON value"), failure();
      return {JsonFieldStatus::not_object};
    }
    JsonFieldStatus status = JsonFieldStatus::missing;
    std::string_view found;  // the raw field value, quotes excluded
    bool found_escaped = false;
    const bool parsed = container(0, [&](std::string_view key, bool key_escaped) {
      if (!key_is(key, key_escaped, name)) return value(1);
      if (p_ < end_ && *p_ == '"') {
        status = JsonFieldStatus::ok;
        return string(&found, &found_escaped);
      }
      status = JsonFieldStatus::not_string;  // a later member of that name may still be one
      return value(1);
    });
    if (!parsed) return failure();
    skip_space();
    if (p_ != end_) return fail("text after the JSON value"), failure();
    if (status == JsonFieldStatus::ok) decode(found, found_escaped, text);
    return {status};
  }

 private:
  void skip_space() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }
  bool fail(const char* what) {
    if (!error_) {
      error_ = what;
      error_at_ = static_cast<size_t>(p_ - begin_);
    }
    return false;
  }
  JsonFieldResult failure() const {
    return {JsonFieldStatus::not_json, error_at_, error_ ? error_ : "invalid JSON"};
  }

  bool value(int depth) {
    if (p_ == end_) return fail("expected a value");
    switch (*p_) {
      case '"': {
        std::string_view ignored;
        bool escaped;
        return string(&ignored, &escaped);
      }
      case '{':
      case '[':
        return container(depth);
      case 't':
        return literal("true");
      case 'f':
        return literal("false");
      case 'n':
        return literal("null");
      default:
        return number();
    }
  }

  bool container(int depth) {
    return container(depth, [&](std::string_view, bool) { return value(depth + 1); });
  }

  // An object or array at p_ (on its '{' or '['), checked, each element's value left to
  // element(key, key_escaped) with p_ on it (an array's elements have no key), which must
  // consume it or fail.
  template <typename Element>
  bool container(int depth, Element&& element) {
    if (depth >= kMaxDepth) return fail("nested deeper than 512 levels");
    const char close = *p_ == '{' ? '}' : ']';
    const bool object = close == '}';
    ++p_;
    skip_space();
    if (p_ < end_ && *p_ == close) return ++p_, true;
    for (;;) {
      skip_space();
      std::string_view key;
      bool key_escaped = false;
      if (object) {
        if (p_ == end_ || *p_ != '"') return fail("expected a member name");
        if (!string(&key, &key_escaped)) return false;
        skip_space();
        if (p_ == end_ || *p_ != ':') return fail("expected ':'");
        ++p_;
        skip_space();
      }
      if (!element(key, key_escaped)) return false;
      skip_space();
      if (p_ < end_ && *p_ == ',') {
        ++p_;
        continue;
      }
      if (p_ < end_ && *p_ == close) return ++p_, true;
      return fail(object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
  }

  bool literal(const char* word) {
    const size_t n = std::strlen(word);
    if (static_cast<size_t>(end_ - p_) < n || std::memcmp(p_, word, n) != 0)
      return fail("expected a value");
    p_ += n;
    return true;
  }

  bool is_digit() const { return p_ < end_ && *p_ >= '0' && *p_ <= '9'; }

  // RFC 8259's number grammar. Its value is never needed, so one beyond a double's range is
  // accepted (nlohmann::json refuses it: the one record this scanner takes that it would not).
  bool number() {
    if (p_ < end_ && *p_ == '-') ++p_;
    if (!is_digit()) return fail("expected a value");
    if (*p_++ != '0')
      while (is_digit()) ++p_;
    if (p_ < end_ && *p_ == '.') {
      ++p_;
      if (!is_digit()) return fail("expected a digit");
      while (is_digit()) ++p_;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (!is_digit()) return fail("expected a digit");
      while (is_digit()) ++p_;
    }
    return true;
  }

  // A string at p_ (on its opening quote), checked: *raw gets its bytes between the quotes.
  bool string(std::string_view* raw, bool* escaped) {
    const char* start = ++p_;
    *escaped = false;
    for (;;) {
      while (end_ - p_ >= 8) {  // plain ASCII eight bytes at a time
        uint64_t word;
        std::memcpy(&word, p_, 8);
        if (has_special_byte(word)) break;
        p_ += 8;
      }
      if (p_ == end_) return fail("unterminated string");
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        *raw = std::string_view(start, static_cast<size_t>(p_ - start));
        ++p_;
        return true;
      }
      if (c == '\\') {
        *escaped = true;
        if (!escape()) return false;
      } else if (c < 0x20) {
        return fail("control character in a string");
      } else if (c >= 0x80) {
        if (!utf8_sequence()) return false;
      } else {
        ++p_;
      }
    }
  }

  // \X or \uXXXX (a high surrogate only with its low one) at p_.
  bool escape() {
    ++p_;
    if (p_ == end_) return fail("unterminated string");
    switch (*p_) {
      case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
        ++p_;
        return true;
      case 'u': {
        uint32_t unit;
        if (!hex4(&unit)) return false;
        if (unit >= 0xDC00 && unit <= 0xDFFF) return fail("a low surrogate without its high one");
        if (unit >= 0xD800 && unit <= 0xDBFF) {
          uint32_t low;
          if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u')
            return fail("a high surrogate without its low one");
          ++p_;
          if (!hex4(&low)) return false;
          if (low < 0xDC00 || low > 0xDFFF) return fail("a high surrogate without its low one");
        }
        return true;
      }
      default:
        return fail("unknown escape");
    }
  }

  // 'u' and four hex digits at p_.
  bool hex4(uint32_t* unit) {
    ++p_;
    if (end_ - p_ < 4) return fail("short \\u escape");
    *unit = 0;
    for (int i = 0; i < 4; ++i) {
      const int digit = hex_value(p_[i]);
      if (digit < 0) return fail("bad \\u escape");
      *unit = (*unit << 4) | static_cast<uint32_t>(digit);
    }
    p_ += 4;
    return true;
  }

  // One well-formed UTF-8 sequence of two to four bytes at p_ (RFC 3629's table: no overlong
  // forms, no surrogates, nothing above U+10FFFF).
  bool utf8_sequence() {
    const auto* s = reinterpret_cast<const unsigned char*>(p_);
    const size_t left = static_cast<size_t>(end_ - p_);
    auto in = [](unsigned char c, unsigned lo, unsigned hi) { return c >= lo && c <= hi; };
    size_t length = 0;
    unsigned second_lo = 0x80, second_hi = 0xBF;
    if (in(s[0], 0xC2, 0xDF)) {
      length = 2;
    } else if (in(s[0], 0xE0, 0xEF)) {
      length = 3;
      if (s[0] == 0xE0) second_lo = 0xA0;
      if (s[0] == 0xED) second_hi = 0x9F;
    } else if (in(s[0], 0xF0, 0xF4)) {
      length = 4;
      if (s[0] == 0xF0) second_lo = 0x90;
      if (s[0] == 0xF4) second_hi = 0x8F;
    } else {
      return fail("invalid UTF-8");
    }
    if (left < length || !in(s[1], second_lo, second_hi)) return fail("invalid UTF-8");
    for (size_t i = 2; i < length; ++i)
      if (!in(s[i], 0x80, 0xBF)) return fail("invalid UTF-8");
    p_ += length;
    return true;
  }

  static void decode_into(std::string_view raw, std::string* out) {
    out->clear();
    out->reserve(raw.size());
    size_t i = 0;
    while (i < raw.size()) {
      const size_t slash = raw.find('\\', i);
      out->append(raw.substr(i, slash == std::string_view::npos ? raw.npos : slash - i));
      if (slash == std::string_view::npos) break;
      const char kind = raw[slash + 1];
      i = slash + 2;
      switch (kind) {
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          auto unit_at = [&](size_t at) {
            uint32_t unit = 0;
            for (size_t k = 0; k < 4; ++k)
              unit = (unit << 4) | static_cast<uint32_t>(hex_value(raw[at + k]));
            return unit;
          };
          uint32_t code_point = unit_at(i);
          i += 4;
          if (code_point >= 0xD800 && code_point <= 0xDBFF) {  // checked: its low one follows
            code_point = 0x10000 + ((code_point - 0xD800) << 10) + (unit_at(i + 2) - 0xDC00);
            i += 6;
          }
          append_utf8(code_point, out);
          break;
        }
        default: out->push_back(kind); break;  // " \ /
      }
    }
  }

  static void decode(std::string_view raw, bool escaped, std::string* out) {
    if (escaped)
      decode_into(raw, out);
    else
      out->assign(raw);
  }

  static bool key_is(std::string_view key, bool escaped, std::string_view name) {
    if (!escaped) return key == name;
    std::string decoded;
    decode_into(key, &decoded);
    return decoded == name;
  }

  const char* begin_;
  const char* p_;
  const char* end_;
  const char* error_ = nullptr;
  size_t error_at_ = 0;
};

}  // namespace

JsonFieldResult json_string_field(std::string_view record, std::string_view name,
                                  std::string* text) {
  return Scanner(record).field(name, text);
}

}  // namespace boostlm
