#include "model/presets.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "core/error.h"

#ifndef BOOSTLM_SOURCE_DIR
#define BOOSTLM_SOURCE_DIR "."
#endif

namespace boostlm {

namespace fs = std::filesystem;

namespace {

const std::vector<std::string>& preset_dirs() {
  static const std::vector<std::string> dirs = {"configs", BOOSTLM_SOURCE_DIR "/configs"};
  return dirs;
}

// The names of the presets there are, for messages: "60m-cola, 60m-dense, ..., tiny-svd".
std::string preset_names() {
  std::vector<std::string> names;
  for (const std::string& dir : preset_dirs()) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec))
      if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
    if (!names.empty()) break;
  }
  std::sort(names.begin(), names.end());
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : ", ") + name;
  return text.empty() ? "none found" : text;
}

}  // namespace

std::string preset_file(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos) return "";
  const std::string file = name.ends_with(".json") ? name : name + ".json";
  for (const std::string& dir : preset_dirs()) {
    const std::string path = dir + "/" + file;
    if (fs::is_regular_file(path)) return path;
  }
  return "";
}

std::string resolve_config_path(const std::string& name_or_path) {
  if (fs::is_regular_file(name_or_path)) return name_or_path;
  const std::string preset = preset_file(name_or_path);
  if (!preset.empty()) return preset;
  throw error("no model config ", name_or_path, ": give a config file or a preset of configs/ (",
              preset_names(), ")");
}

}  // namespace boostlm
