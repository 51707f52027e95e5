// The `boostlm` command line: one file per subcommand, each registering itself on the app.
// A subcommand's callback throws boostlm::Error for bad input; main prints it and exits 1.
#pragma once

#include <CLI/CLI.hpp>

namespace boostlm::cli {

void add_prepare(CLI::App& app);
void add_train(CLI::App& app);
void add_eval(CLI::App& app);
void add_init(CLI::App& app);
void add_generate(CLI::App& app);
void add_convert(CLI::App& app);  // Hugging Face import/export, dense → low rank
void add_launch(CLI::App& app);
void add_plan(CLI::App& app);       // the performance model: predict and rank layouts
void add_calibrate(CLI::App& app);  // measure this machine for plan
void add_bench(CLI::App& app);      // benchmarks: layouts, ablations, gemm, step
void add_plot(CLI::App& app);       // runs' curves from metrics.jsonl, through gnuplot

// Adds `--comm-timeout SECONDS` (default 300, 0: off) to a command that communicates between ranks,
// and configures the communication watchdog (comm/watchdog.h) once the command line is parsed.
void add_comm_timeout(CLI::App& cmd);

// Adds `--device cpu|cpu-checked|cuda` (default cpu) to a command that computes; the device is
// selected, or refused with the reason, as the command line is parsed (core/device.h).
void add_device_option(CLI::App& cmd);

// The exit code a subcommand asks main to return (default 0).
int& exit_code();

// A run stopped by the user (SIGINT or SIGTERM, directly or through `launch`) saves a checkpoint and
// exits with this status, as a shell reports a command ended by Ctrl-C (128 + SIGINT), so that
// `train && eval` does not go on as if the run had finished. `launch` returns it too.
constexpr int kInterruptedExitCode = 130;

}  // namespace boostlm::cli
