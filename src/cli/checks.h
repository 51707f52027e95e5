// Option checks whose help text and error messages read as a person would write them.
//
// CLI11's PositiveNumber and NonNegativeNumber are ranges over double, so their messages print
// the bounds as numbers of 300 digits, and they let inf and nan through.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace boostlm::cli {

// An integer option of at least `min`: "--keep -1 is out of range: at least 1".
CLI::Validator at_least(int64_t min);
// A finite number in [min, max), or [min, max] with `max_inclusive`.
CLI::Validator number_in(double min, double max, bool max_inclusive);
// A finite number > 0, and a finite number >= 0.
CLI::Validator positive();
CLI::Validator non_negative();

// Shows every option's default in the help of `app` and its subcommands added after this call.
void show_defaults(CLI::App& app);

// Throws Error naming the command when the first word is not one of app's subcommands (CLI11
// would say only "A subcommand is required").
void check_command_name(const CLI::App& app, int argc, char** argv);

}  // namespace boostlm::cli
