// json_string_field against a full JSON parser (nlohmann::json): the same records accepted and
// refused, the same text decoded, on chosen cases and on many damaged random records.
#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "data/json_record.h"

namespace boostlm {
namespace {

using nlohmann::json;

// What a full parse makes of `record`: the status json_string_field should give, and the text.
// nullopt for the one kind of record the scanner knowingly accepts and nlohmann refuses: a number
// beyond a double's range.
std::optional<std::pair<JsonFieldStatus, std::string>> reference(const std::string& record,
                                                                 const std::string& field) {
  json parsed;
  try {
    parsed = json::parse(record);
  } catch (const json::out_of_range&) {
    return std::nullopt;
  } catch (const json::exception&) {
    return std::make_pair(JsonFieldStatus::not_json, std::string());
  }
  if (!parsed.is_object()) return std::make_pair(JsonFieldStatus::not_object, std::string());
  if (!parsed.contains(field)) return std::make_pair(JsonFieldStatus::missing, std::string());
  if (!parsed[field].is_string()) return std::make_pair(JsonFieldStatus::not_string, std::string());
  return std::make_pair(JsonFieldStatus::ok, parsed[field].get<std::string>());
}

void expect_as_reference(const std::string& record, const std::string& field = "text") {
  const auto want = reference(record, field);
  if (!want) return;
  std::string text = "unchanged";
  const JsonFieldResult got = json_string_field(record, field, &text);
  ASSERT_EQ(static_cast<int>(got.status), static_cast<int>(want->first))
      << "record: " << record << "\nscanner: " << got.error << " at " << got.error_offset;
  if (got.status == JsonFieldStatus::ok) {
    ASSERT_EQ(text, want->second) << record;
  } else {
    ASSERT_EQ(text, "unchanged") << record;
  }
}

TEST(JsonRecord, ChosenRecordsAsAFullParser) {
  const std::vector<std::string> records = {
      R"({"text": "plain"})",
      R"({"id": 1, "text": "a\nb\t\"q\" \\ \/ \b\f\r", "meta": {"x": [1, 2.5e-3, -0, true, null]}})",
      R"({"text": "\u00e9\u4e2d\ud83d\ude00 caf\u00E9"})",
      "{\"text\": \"caf\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x98\x80\"}",
      "\xEF\xBB\xBF{\"text\": \"after a BOM\"}",
      R"(  {"text":"spaces around"}  )",
      R"({"te\u0078t": "an escaped key"})",
      R"({"text": 5})",
      R"({"text": null})",
      R"({"text": ["a"]})",
      R"({"body": "no text"})",
      R"({})",
      R"([1, 2])",
      R"("a string")",
      R"(12)",
      R"({"text": "unterminated)",
      R"({"text": "a"} trailing)",
      R"({"text": "a",})",
      R"({"text" "a"})",
      R"({'text': 'a'})",
      R"({"text": "bad \x escape"})",
      R"({"text": "\ud83d alone"})",
      R"({"text": "\ude00 alone"})",
      R"({"text": "\ud83d\u0041"})",
      R"({"text": "\u12g4"})",
      "{\"text\": \"a\tb\"}",                 // a raw control character
      "{\"text\": \"\xC3\"}",                 // a truncated sequence
      "{\"text\": \"\xC0\xAF\"}",             // an overlong form
      "{\"text\": \"\xED\xA0\x80\"}",         // a surrogate in UTF-8
      "{\"text\": \"\xF4\x90\x80\x80\"}",     // above U+10FFFF
      "{\"text\": \"\xFF\"}",
      R"({"a": 01})",
      R"({"a": 1.})",
      R"({"a": .5})",
      R"({"a": -})",
      R"({"a": 1e})",
      R"({"a": tru})",
      R"({"a": [1 2]})",
      R"({"a": {"b": 1,}})",
      R"({"a": [1,]})",
      R"({"text": "x"}{"text": "y"})",
      R"({"text": "x", "text": 3})",
      R"({"text": 3, "text": "x"})",
      R"({"text": "first", "text": "last"})",
      "",
      "   ",
  };
  for (const std::string& record : records) expect_as_reference(record);
  expect_as_reference(R"({"content": "another field", "text": 1})", "content");
}

TEST(JsonRecord, NamesWhereARecordIsNotJson) {
  std::string text;
  const JsonFieldResult result = json_string_field(R"({"text": "a" "b"})", "text", &text);
  EXPECT_EQ(result.status, JsonFieldStatus::not_json);
  EXPECT_EQ(result.error_offset, 13u);
  EXPECT_STREQ(result.error, "expected ',' or '}'");
  std::string deep(600, '[');
  EXPECT_EQ(json_string_field("{\"a\": " + deep, "text", &text).status, JsonFieldStatus::not_json);
}

std::string random_string(std::mt19937_64& rng) {
  static const std::vector<std::string> pieces = {
      "a", "Z", " ", "\"", "\\", "/", "\n", "\t", "\x01", "\x7f", "é", "中", "😀", "\u2028",
      "text", "0", "{", "]", ":"};
  std::string s;
  for (int n = static_cast<int>(rng() % 12); n > 0; --n) s += pieces[rng() % pieces.size()];
  return s;
}

// A random JSON value: objects, arrays, numbers, literals, and strings of ASCII, escapes and
// multi-byte characters.
json random_value(std::mt19937_64& rng, int depth) {
  const int kind = static_cast<int>(rng() % (depth > 2 ? 4 : 6));
  auto random_string = [&] { return boostlm::random_string(rng); };
  switch (kind) {
    case 0:
      return random_string();
    case 1:
      return static_cast<int64_t>(rng() % 2000) - 1000;
    case 2:
      return static_cast<double>(rng() % 100000) / 64.0 - 700.0;
    case 3:
      return rng() % 3 == 0 ? json(nullptr) : json(rng() % 2 == 0);
    case 4: {
      json array = json::array();
      for (int n = static_cast<int>(rng() % 4); n > 0; --n)
        array.push_back(random_value(rng, depth + 1));
      return array;
    }
    default: {
      json object = json::object();
      for (int n = static_cast<int>(rng() % 5); n > 0; --n)
        object[rng() % 3 == 0 ? std::string("text") : random_string()] =
            random_value(rng, depth + 1);
      return object;
    }
  }
}

// Records as a corpus holds them (ASCII-escaped or not), then damaged: a byte removed, replaced
// or inserted, or the record cut short. Every one is judged as nlohmann judges it.
TEST(JsonRecord, DamagedRandomRecordsAsAFullParser) {
  std::mt19937_64 rng(20261202);
  int checked = 0, accepted = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    json value = random_value(rng, 0);
    if (rng() % 4 != 0) {
      json object = json::object();
      object["id"] = i;
      object["text"] = rng() % 4 != 0 ? json(random_string(rng)) : random_value(rng, 1);
      if (rng() % 2 == 0) object["meta"] = value;
      value = object;
    }
    std::string record = value.dump(-1, ' ', /*ensure_ascii=*/rng() % 2 == 0);
    static const std::string kBytes = "{}[]\":,\\ uetn0-1.e\xC3\xA9\xE4\xFF\x80";
    switch (rng() % 5) {
      case 0:
        break;  // intact
      case 1:
        if (!record.empty()) record.erase(rng() % record.size(), 1);
        break;
      case 2:
        if (!record.empty()) record[rng() % record.size()] = kBytes[rng() % kBytes.size()];
        break;
      case 3:
        record.insert(record.begin() + static_cast<std::ptrdiff_t>(rng() % (record.size() + 1)),
                      kBytes[rng() % kBytes.size()]);
        break;
      default:
        record.resize(rng() % (record.size() + 1));
        break;
    }
    expect_as_reference(record);
    if (HasFatalFailure()) return;
    ++checked;
    std::string ignored;
    const JsonFieldStatus status = json_string_field(record, "text", &ignored).status;
    accepted += status == JsonFieldStatus::ok;
    refused += status == JsonFieldStatus::not_json;
  }
  // Both kinds are well represented, or the comparison says little.
  EXPECT_GT(accepted, checked / 5);
  EXPECT_GT(refused, checked / 5);
}

}  // namespace
}  // namespace boostlm
