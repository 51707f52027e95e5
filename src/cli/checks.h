// Option checks whose help text and error messages read as a person would write them.
//
// CLI11's PositiveNumber and NonNegativeNumber are ranges over double, so their messages print
// the bounds as numbers of 300 digits, and they let inf and nan through.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace boostlm::cli {

// An integer option of at least `min`: "--keep -1 is out of range: at least 1".
CLI::Validator at_least(int64_t min);
// A finite number in [min, max), or [min, max] with `max_inclusive`.
CLI::Validator number_in(double min, double max, bool max_inclusive);
// A finite number > 0, and a finite number >= 0.
CLI::Validator positive();
// A share in (0, 1]: above 0, at most 1 (--top-p, --energy: 0 would keep nothing).
CLI::Validator share();
CLI::Validator non_negative();

// Shows every option's default in the help of `app` and its subcommands added after this call.
void show_defaults(CLI::App& app);
// Once every subcommand is added: a required option shows REQUIRED and no default, and an
// option whose default is an empty list shows none.
void finish_help(CLI::App& app);
// For an option whose default is computed when the command runs ("the model's max_seq_len"):
// the help shows no number, and the option's description says what the default is.
CLI::Option* computed_default(CLI::Option* option);

// A model config given by file or by preset name (model/presets.h): the option's value becomes
// the file's path.
CLI::Validator model_config();

// The token shards a --data argument names, in order: a directory from `boostlm prepare` (its
// validation shards: val_000000.bin, ..., or val.bin of an older preparation) or one shard file.
// Throws Error when it is neither.
std::vector<std::string> eval_shard_paths(const std::string& data);

// Prints "boostlm <command>: warning: <old> is deprecated, use <new>" on stderr.
void warn_deprecated(const std::string& command, const std::string& old_name,
                     const std::string& new_name);

// Adds `old_name` (one spelling, "--batches" or "-n") as a deprecated alias of the option
// `new_name`: it sets `target` as the new option does, after a one-line note on stderr, and is
// hidden from the help. Kept for one release (README, "Flags").
template <class T>
CLI::Option* add_deprecated(CLI::App& cmd, const std::string& old_name, const std::string& new_name,
                            T& target) {
  const std::string command = cmd.get_name();
  return cmd
      .add_option_function<T>(
          old_name,
          [&target, command, old_name, new_name](const T& value) {
            warn_deprecated(command, old_name, new_name);
            target = value;
          },
          "deprecated spelling of " + new_name)
      ->group("");
}

// Throws Error naming the command when the first word is not one of app's subcommands (CLI11
// would say only "A subcommand is required").
void check_command_name(const CLI::App& app, int argc, char** argv);

}  // namespace boostlm::cli
