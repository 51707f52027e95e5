#include "checkpoint/checkpoint_json.h"

#include <limits>

#include "core/error.h"

namespace boostlm {

namespace {

nlohmann::json parse_json(std::string_view text, const std::string& source) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throw error("checkpoint: ", source, " is not valid JSON: ", e.what());
  }
}

// Counts in a checkpoint are whole numbers in [0, 2^53]: far beyond any run, and small enough
// that the trainer's additions to them cannot overflow.
int64_t count_field(const nlohmann::json& j, const char* key, const std::string& source) {
  constexpr int64_t kMax = int64_t{1} << 53;
  if (!j.contains(key)) throw error("checkpoint: ", source, " lacks '", key, "'");
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer())
    throw error("checkpoint: ", source, ": '", key, "' must be a whole number, not ", v.dump());
  if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(kMax)
                             : v.get<int64_t>() < 0 || v.get<int64_t>() > kMax)
    throw error("checkpoint: ", source, ": '", key, "' is ", v.dump(), ", outside [0, 2^53]");
  return v.get<int64_t>();
}

}  // namespace

int64_t parse_trainer_state(std::string_view text, const std::string& source,
                            TrainingState& state) {
  const nlohmann::json j = parse_json(text, source);
  if (!j.is_object()) throw error("checkpoint: ", source, " is not a JSON object");
  state.step = count_field(j, "step", source);
  state.tokens_seen = count_field(j, "tokens_seen", source);
  if (!j.contains("loader") || !j.at("loader").is_object())
    throw error("checkpoint: ", source, " lacks the loader's state (an object under 'loader')");
  state.loader = j.at("loader");
  state.extra = j.value("extra", nlohmann::json::object());
  if (!state.extra.is_object() && !state.extra.is_null())
    throw error("checkpoint: ", source, ": 'extra' must be an object");
  return count_field(j, "optimizer_step", source);
}

std::map<std::string, std::string> parse_checksums(std::string_view text,
                                                   const std::string& source) {
  const nlohmann::json j = parse_json(text, source);
  if (!j.is_object())
    throw error("checkpoint: ", source, " is corrupt: expected an object of file: checksum");
  std::map<std::string, std::string> out;
  for (const auto& [file, checksum] : j.items()) {
    if (file.empty() || file == "." || file == ".." ||
        file.find_first_of(std::string("/\0", 2)) != std::string::npos)
      throw error("checkpoint: ", source, " is corrupt: '", file,
                  "' is not a file name in the checkpoint directory");
    if (!checksum.is_string())
      throw error("checkpoint: ", source, " is corrupt: the checksum of ", file,
                  " is not a string (", checksum.dump(), ")");
    out[file] = checksum.get<std::string>();
  }
  return out;
}

ModelConfig parse_checkpoint_config(std::string_view text, const std::string& source) {
  const nlohmann::json j = parse_json(text, source);
  try {
    if (!j.is_object()) throw error("expected a JSON object");
    if (!j.contains("boostlm"))
      throw error("no \"boostlm\" section (a Hugging Face config is read by hf_import)");
    return ModelConfig::from_json(j["boostlm"]);
  } catch (const nlohmann::json::exception& e) {
    throw error("checkpoint: ", source, " lacks a field: ", e.what());
  } catch (const Error& e) {
    throw error("checkpoint: ", source, ": ", e.what());
  }
}

}  // namespace boostlm
