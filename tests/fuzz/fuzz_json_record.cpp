// json_string_field (data/json_record.h), the JSON Lines scanner of prepare, against nlohmann::json
// on the same bytes: both must accept or refuse alike and decode the same text, except where the
// scanner documents a difference (a number beyond a double's range; nesting deeper than 512).
#include <string>

#include <nlohmann/json.hpp>

#include "data/json_record.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using boostlm::JsonFieldStatus;
  const std::string record(text_of(data, size));
  std::string text = "unchanged";
  const boostlm::JsonFieldResult got = boostlm::json_string_field(record, "text", &text);
  if (record.find('\0') != std::string::npos) {
    // A NUL byte is never JSON (not whitespace, and a control character inside a string), but
    // nlohmann takes one as the end of its input, so it is no reference here.
    FUZZ_CHECK(got.status == JsonFieldStatus::not_json);
    return 0;
  }
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(record);
  } catch (const nlohmann::json::out_of_range&) {
    return 0;  // a number beyond a double's range: the scanner accepts it
  } catch (const nlohmann::json::exception&) {
    FUZZ_CHECK(got.status == JsonFieldStatus::not_json);
    FUZZ_CHECK(text == "unchanged");
    return 0;
  }
  if (got.status == JsonFieldStatus::not_json) {
    FUZZ_CHECK(std::string(got.error) == "nested deeper than 512 levels");
    return 0;
  }
  if (!parsed.is_object()) {
    FUZZ_CHECK(got.status == JsonFieldStatus::not_object);
  } else if (!parsed.contains("text")) {
    FUZZ_CHECK(got.status == JsonFieldStatus::missing);
  } else if (!parsed["text"].is_string()) {
    FUZZ_CHECK(got.status == JsonFieldStatus::not_string);
  } else {
    FUZZ_CHECK(got.status == JsonFieldStatus::ok);
    FUZZ_CHECK(text == parsed["text"].get<std::string>());
  }
  return 0;
}
