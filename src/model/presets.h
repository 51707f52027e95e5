// Model presets: configs/<name>.json, found by name wherever a command takes a model config
// (`train -c tiny-cola`, `init -c 60m-dense`, `plan -m 7b --arch cola`, `bench --shape 60m`).
#pragma once

#include <string>

namespace boostlm {

// The file of preset `name` (configs/<name>.json, looked for in ./configs and then in the source
// tree's configs/), or "" when there is none.
std::string preset_file(const std::string& name);

// What a --config argument names: an existing file as given, else a preset by name. Throws Error
// naming the presets when it is neither.
std::string resolve_config_path(const std::string& name_or_path);

}  // namespace boostlm
