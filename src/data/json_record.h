// One field of one JSON Lines record, without building the record.
//
// A pretraining corpus is mostly the text field of millions of JSON objects; a DOM parser
// (nlohmann::json) spends more time allocating the object than the tokenizer spends on its text.
// This validates the whole record as JSON (RFC 8259: UTF-8 throughout, no lone surrogate
// escapes, nothing after the value) in one pass and decodes only the wanted string, so a record
// is accepted or refused exactly as a full parse would (the field's last occurrence wins, as in
// nlohmann::json) at a fraction of the cost.
#pragma once

#include <string>
#include <string_view>

namespace boostlm {

enum class JsonFieldStatus { ok, not_json, not_object, missing, not_string };

struct JsonFieldResult {
  JsonFieldStatus status = JsonFieldStatus::not_json;
  // not_json: where (a byte offset in the record) and what; empty otherwise.
  size_t error_offset = 0;
  const char* error = "";
};

// The string value of the top-level field `name` of `record`, decoded into *text (left as it
// was unless the status is ok).
JsonFieldResult json_string_field(std::string_view record, std::string_view name,
                                  std::string* text);

}  // namespace boostlm
