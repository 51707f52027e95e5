// A run directory's bookkeeping: whether it already holds a run, the stale temporaries a crash left
// in it, which checkpoints to keep, and its metrics: metrics.jsonl and TensorBoard event files.
//
// A run directory holds config.json, metrics.jsonl, events.out.tfevents.* (one per start of the
// run) and checkpoints/{step_NNNNNN/, latest}. Only world rank 0 calls these (it alone writes the
// run directory).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/tfevents.h"

namespace boostlm {

// A step_* checkpoint directory with the step its name encodes.
struct CheckpointEntry {
  int64_t step = 0;
  std::filesystem::path dir;
};

// The step_N checkpoints under `checkpoints`, ordered by step number (not by name: step_1000000
// sorts before step_999999 as text). Names that are not step_<digits> are left out.
std::vector<CheckpointEntry> list_checkpoints(const std::filesystem::path& checkpoints);

// The checkpoint directory name `checkpoints/latest` names ("" when there is none).
std::string latest_checkpoint_name(const std::filesystem::path& checkpoints);

// Removes the step checkpoints that are not among the newest `keep`, except the one `latest`
// names and `keep_also` (the checkpoint just written), whatever their steps: a run resumed from
// an older checkpoint writes steps below those of the abandoned ones.
void prune_checkpoints(const std::filesystem::path& checkpoints, int64_t keep,
                       const std::string& keep_also);

// True when the directory holds (part of) an earlier run: metrics.jsonl, config.json or
// checkpoints/.
bool holds_run(const std::filesystem::path& run);

// Refuses to start a run in `run` when it already holds another run, unless the run continues
// there (`resume_dir` is a checkpoint inside it) or `overwrite` is set, in which case the old
// run's files (and only those, its event files among them) are removed. Throws Error with the ways out.
void claim_run_directory(const std::filesystem::path& run, const std::string& resume_dir,
                         bool overwrite);

// Removes the temporaries a crash or failed save left behind (.step_N.tmp.PID checkpoint
// directories, latest.tmp.PID, config.json.tmp.PID...) whose process is gone. A checkpoint moved
// aside for replacement (.step_N.old.PID) whose replacement never arrived is moved back instead.
// Whether a process is gone is asked on the host that ran it: the PID of the run's last owner
// (record_run_owner) on another host is gone, since the caller now holds the lock it held; any
// other PID is looked up on this host. Returns a line per action, for the log.
std::vector<std::string> clean_stale_temporaries(const std::filesystem::path& run);

// Records this process (host and PID) in DIR/.owner as the one whose PID names the temporaries
// the run directory gets from now on: a restart on another node then does not look that PID up
// among its own processes. Call with the run's lock held, after clean_stale_temporaries.
void record_run_owner(const std::filesystem::path& run);

// An exclusive lock on the run directory (flock on DIR/.lock) for the life of the object: two
// trainers writing one directory prune each other's checkpoints and interleave their metrics.
class RunDirectoryLock {
 public:
  RunDirectoryLock() = default;
  explicit RunDirectoryLock(const std::filesystem::path& run);  // throws Error when held
  ~RunDirectoryLock();
  RunDirectoryLock(RunDirectoryLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  RunDirectoryLock& operator=(RunDirectoryLock&& other) noexcept;
  RunDirectoryLock(const RunDirectoryLock&) = delete;
  RunDirectoryLock& operator=(const RunDirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

// The scalars a metrics line gives TensorBoard, under the tags docs/training.md#tensorboard lists:
// the line's own numbers (a float each), the bytes of each group's collectives summed over kinds,
// and a checkpoint's stall and begin-to-commit time on the steps that have them.
std::vector<Scalar> tensorboard_scalars(const nlohmann::json& line);

// A run's metrics: metrics.jsonl, one JSON object per line, and with `event_file` the same
// numbers as TensorBoard scalars (tensorboard_scalars) in an event file of this start of the run,
// beside it. Every write is checked: a full disk or an I/O error throws Error naming the file
// instead of leaving a line cut short and training on in silence.
class MetricsLog {
 public:
  MetricsLog() = default;
  // Opens `path` for appending. With `keep_through_step` >= 0 (a resumed run), lines of steps
  // after it (the steps the crashed run did after its last checkpoint, about to be rerun) and a
  // final line cut short are dropped first, so the file reads as one run. An event file cannot be
  // cut back: each begins with a SessionLog START at its first step (keep_through_step + 1, or 1),
  // and TensorBoard drops the earlier files' points from a restart's START step on.
  MetricsLog(std::string path, int64_t keep_through_step, bool event_file = false);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  MetricsLog(MetricsLog&& other) noexcept;
  MetricsLog& operator=(MetricsLog&& other) noexcept;

  void append(const nlohmann::json& line);
  int64_t dropped_lines() const { return dropped_; }
  const std::string& path() const { return path_; }
  const std::string& event_path() const { return events_.path(); }  // "" without one

 private:
  std::string path_;
  int fd_ = -1;
  int64_t dropped_ = 0;
  EventFileWriter events_;
};

}  // namespace boostlm
