// The settings that shape what a run computes, saved in every checkpoint and restored by --resume.
//
// One rule for all of them (the README's table under Checkpoints): each is saved under its flag's
// name (`--min-lr` as "min_lr") in trainer_state.json's "extra"; a resume takes the saved value
// unless the flag is given again (TrainOptions::given), and says so for every setting that ends up
// different from the checkpoint's. Two kinds are exceptions:
//   - the batch shape and data order (--batch-size, --seq-len, --seed, --shuffle) cannot change:
//     the loader's saved position counts windows of that shape in that order, so a resume that
//     changes one is refused, naming the flag;
//   - the parallel sizes (--tp, --pp, --dp) describe the job that runs, not the run: they are
//     restored together when none is given and the job has the checkpoint's number of ranks, and
//     otherwise come from the command line (checkpoints reshard to any sizes).
// How an invocation runs (--tp-overlap, --bucket-mb, --log-interval, paths) is never saved.
// A checkpoint older than a setting lacks it; that setting comes from the command line, as it did.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_json.h"
#include "train/trainer.h"

namespace boostlm {

// The settings of `options` to save. `options` is resolved: its layout set and schedule_steps the
// schedule's real length.
nlohmann::json saved_run_settings(const TrainOptions& options);

// Applies a checkpoint's saved settings (`saved.extra`; for the batch shape and data order of a
// checkpoint older than them, the loader's state) to `options`, except the settings whose flags
// are in options.given. `world_size` is the job's number of ranks, `source` names the checkpoint
// in messages. Returns one line per setting that differs from the checkpoint's, saying why; throws
// Error naming the flag for a change a resume cannot make or a saved value that is malformed.
std::vector<std::string> restore_run_settings(TrainOptions& options, const TrainingState& saved,
                                              int world_size, const std::string& source);

}  // namespace boostlm
