// Finding the model a plan is for: a config file, a preset of configs/ (<name>-<arch>.json), or
// one of the paper's shapes (plan/paper.h: 1b … 30b).
#pragma once

#include <string>

#include "model/config.h"

namespace boostlm::plan {

// The model `name_or_path` names, as architecture `arch` (a config file's own arch wins).
ModelConfig find_model(const std::string& name_or_path, Arch arch);
// The dense model of the same shape (what dense-tp runs).
ModelConfig dense_counterpart(const std::string& name_or_path, const ModelConfig& model);
// The preset configs/<name>-<arch>.json (model/presets.h says where presets are looked for).
std::string preset_path(const std::string& name, Arch arch);  // "" when there is none

}  // namespace boostlm::plan
