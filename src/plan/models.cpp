#include "plan/models.h"

#include <filesystem>

#include "core/error.h"
#include "model/presets.h"
#include "plan/paper.h"

namespace boostlm::plan {

namespace fs = std::filesystem;

std::string preset_path(const std::string& name, Arch arch) {
  return preset_file(name + "-" + to_string(arch));
}

ModelConfig find_model(const std::string& name, Arch arch) {
  if (name.ends_with(".json") || name.find('/') != std::string::npos) {
    if (!fs::exists(name) && preset_file(name).empty())
      throw error("model config ", name, " does not exist");
    return ModelConfig::load(resolve_config_path(name));
  }
  // A shape (`60m`, with --arch) or a whole preset name (`60m-cola`), as train -c takes it.
  for (const std::string& preset : {preset_path(name, arch), preset_file(name)})
    if (!preset.empty()) return ModelConfig::load(preset);
  if (is_paper_model(name)) return paper_model(name, arch);
  throw error("no model named ", name, ": give a config file, a preset of configs/ (60m, 130m, ",
              "350m, 1b, 7b, tiny, or a whole name such as 60m-cola) or a paper shape (1b, 3b, ",
              "7b, 13b, 30b, or paper-7b …)");
}

ModelConfig dense_counterpart(const std::string& name, const ModelConfig& model) {
  if (model.arch == Arch::dense) return model;
  const bool file = name.ends_with(".json") || name.find('/') != std::string::npos;
  if (!file) {
    const std::string preset = preset_path(name, Arch::dense);
    if (!preset.empty()) return ModelConfig::load(preset);
  }
  ModelConfig dense = model;
  dense.arch = Arch::dense;
  dense.attn_rank = dense.mlp_rank = 0;
  dense.family_ranks.fill(0);
  return dense;
}

}  // namespace boostlm::plan
