// The JSON files of a checkpoint directory (see checkpoint.h), parsed from their text so that the
// parsers are tested and fuzzed without files. Each throws Error naming `source` (the file) on
// anything malformed; none trusts a field's type or range.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "model/config.h"

namespace boostlm {

struct TrainingState {
  int64_t step = 0;  // optimizer steps completed
  int64_t tokens_seen = 0;
  nlohmann::json loader;  // the loader's position, opaque here
  nlohmann::json extra;   // anything else the trainer wants back (arguments, RNG)
};

// trainer_state.json: fills `state` and returns the optimizer's step count.
int64_t parse_trainer_state(std::string_view text, const std::string& source, TrainingState& state);

// checksums.json: file name -> checksum (hex). Every name is a plain file name in the checkpoint
// directory, so a crafted file cannot make verification read outside it.
std::map<std::string, std::string> parse_checksums(std::string_view text,
                                                   const std::string& source);

// config.json's "boostlm" section (a Hugging Face config.json is hf_import's).
ModelConfig parse_checkpoint_config(std::string_view text, const std::string& source);

}  // namespace boostlm
