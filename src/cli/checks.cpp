#include "cli/checks.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "data/prepare.h"
#include "model/presets.h"

namespace boostlm::cli {

namespace {

// The number `text` spells, or nan when it is not one (whole string, no trailing characters).
double parse_number(const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size()) return std::nan("");
  return value;
}

std::string format(double value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

// `range` is the help's short form (">= 1"), `description` the error's ("an integer, at least 1").
CLI::Validator make(std::string range, std::string description,
                    std::function<bool(double)> accept) {
  return CLI::Validator(
      [description, accept](std::string& text) -> std::string {
        const double value = parse_number(text);
        if (std::isnan(value) && text != "nan") return "'" + text + "' is not a number";
        if (!accept(value)) return text + " is out of range: " + description;
        return "";
      },
      range);
}

}  // namespace

CLI::Validator at_least(int64_t min) {
  return make(">=" + std::to_string(min), "an integer, at least " + std::to_string(min),
              [min](double v) { return std::isfinite(v) && v == std::floor(v) && v >= min; });
}

CLI::Validator number_in(double min, double max, bool max_inclusive) {
  const std::string description =
      "a number in [" + format(min) + ", " + format(max) + (max_inclusive ? "]" : ")");
  const std::string range =
      (max_inclusive ? "[" : "[") + format(min) + "," + format(max) + (max_inclusive ? "]" : ")");
  return make(range, description, [=](double v) {
    return std::isfinite(v) && v >= min && (max_inclusive ? v <= max : v < max);
  });
}

CLI::Validator share() {
  return make("(0,1]", "a number above 0 and at most 1",
              [](double v) { return std::isfinite(v) && v > 0 && v <= 1; });
}

CLI::Validator positive() {
  return make(">0", "a finite number above 0", [](double v) { return std::isfinite(v) && v > 0; });
}

CLI::Validator non_negative() {
  return make(">=0", "a finite number, 0 or more",
              [](double v) { return std::isfinite(v) && v >= 0; });
}

void check_command_name(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return;
  const std::string word = argv[1];
  std::string known;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->check_name(word)) return;
    known += (known.empty() ? "" : ", ") + sub->get_name();
  }
  throw error("unknown command '", word, "' (the commands are ", known,
              "; boostlm --help describes them)");
}

void show_defaults(CLI::App& app) {
  app.option_defaults()->always_capture_default();
}

void finish_help(CLI::App& app) {
  // An empty list ("[]") is no default either: such options say what none means.
  for (CLI::Option* option : app.get_options())
    if (option->get_required() || option->get_default_str() == "[]") option->default_str("");
  for (CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) finish_help(*sub);
}

CLI::Option* computed_default(CLI::Option* option) {
  return option->default_str("");
}

CLI::Validator model_config() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          text = resolve_config_path(text);
          return "";
        } catch (const Error& e) {
          return e.what();
        }
      },
      "FILE|PRESET");
}

std::vector<std::string> eval_shard_paths(const std::string& data) {
  namespace fs = std::filesystem;
  if (fs::is_directory(data)) {  // its validation shards (val_000000.bin, ..., or val.bin)
    std::vector<std::string> val = prepared_shards(data, "val");
    if (val.empty())
      throw error("--data ", data, " has no val.bin or val_000000.bin (give a directory from ",
                  "`boostlm prepare` or a token shard)");
    return val;
  }
  if (!fs::is_regular_file(data)) throw error("--data ", data, ": no such file or directory");
  return {data};
}

void warn_deprecated(const std::string& command, const std::string& old_name,
                     const std::string& new_name) {
  std::fprintf(stderr, "boostlm %s: warning: %s is deprecated, use %s\n", command.c_str(),
               old_name.c_str(), new_name.c_str());
}

}  // namespace boostlm::cli
