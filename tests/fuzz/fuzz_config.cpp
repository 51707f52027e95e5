// Model configurations: a preset (ModelConfig::from_json, what `--config` reads) and a
// checkpoint's config.json (boostlm's own or a Hugging Face LLaMA config).
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fuzz_util.h"
#include "model/config.h"
#include "checkpoint/checkpoint_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace boostlm;
  const std::string_view text = text_of(data, size);
  try {
    parse_checkpoint_config(text, "config.json");
  } catch (const Error&) {
  }
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception&) {  // a syntax error, or a number overflowing a double
    return 0;  // ModelConfig::load reports these as "not valid JSON"
  }
  try {
    const ModelConfig config = ModelConfig::from_json(json);
    FUZZ_CHECK(config.d_model > 0 && config.n_heads > 0 && config.d_model % config.n_heads == 0);
    // What a checkpoint stores must read back as the same configuration.
    FUZZ_CHECK(ModelConfig::from_json(config.to_json()).to_json() == config.to_json());
  } catch (const Error&) {
  }
  return 0;
}
