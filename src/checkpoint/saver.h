// Saving a sharded checkpoint from every rank of a job, in parallel and in the background.
//
// Each rank writes the tensors it holds that no other rank writes: a tensor replicated over DP
// replicas (and, unsharded, over the TP group) is written by one of its replicas, the replicas
// sharing the bytes (assign_writers); under ZeRO-1 every DP rank writes the moments of its own
// range. A rank's pieces go to one model file and one optimizer file of its own
// (model-rRRRRR.safetensors, optimizer-rRRRRR.safetensors; model.safetensors and
// optimizer.safetensors for a job of one process), and one rank writes the index (index.json:
// every tensor's full shape and pieces), the small files and checksums.json of them all.
//
// The commit, nothing lost: every rank writes and fsyncs its files under a hidden temporary sibling
// of the checkpoint (.NAME.tmp.PID, PID the root's); once every rank has reported its files written
// (an agreement over the job), the root checks that it sees every one of them there at its
// reported size (a rank on a disk of its own is refused, not committed without its files), writes
// the index and checksums, fsyncs, and renames the directory into place (an existing one of the
// same name is swapped out), then writes `latest`. A rank that dies, a full disk or a stop before
// the rename leaves the earlier checkpoints as they were, and the temporary directory to the next
// start's cleaning (train/run_dir.h). A rename that fails puts back the checkpoint it was to
// replace. Once the rename is done the checkpoint is committed: a directory fsync or the removal
// of the replaced one that fails after it is a warning, and a `latest` that cannot be written is
// an error that says the checkpoint is complete (the next start finds it: resolve_checkpoint).
//
// BOOSTLM_CHECKPOINT_FAULT=KIND@RANK[#N][:SECONDS] (a testing hook; N: the process's N-th save)
// reaches each step: in a rank's writer die, full, slow; in rank 0's commit rename (the rename
// into place fails), fsync (the directory fsync after it fails), die-commit (rank 0 dies after
// the rename, before `latest`), latest (writing `latest` fails).
//
// Asynchronous: begin() blocks only while the rank copies its pieces to a host staging buffer;
// the files are written by a thread of its own while training goes on. The job learns that every
// rank is done through poll(), a small all-reduce that every rank calls at the same points (each
// step), and finish() waits by polling, so that no collective of the job waits long on a slow disk
// and the communication watchdog has nothing to fire at. Only one save is in flight at a time.
//
// Bounded: a save that some rank has not written `timeout_s` after it began (a disk or network
// file system that hangs) ends the job as the watchdog would (its exit code), rank 0 naming the
// checkpoint, the ranks and the files they were at. Nothing is committed, so the earlier
// checkpoints are intact. A synchronous save is written by a thread too, so that it is bounded
// the same way.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "core/device.h"
#include "core/param_table.h"

namespace boostlm {

// This rank's place in the job's grid.
struct ShardRanks {
  int tp_rank = 0, tp = 1, pp_rank = 0, pp = 1, dp_rank = 0, dp = 1;
};

// Which table entries this rank writes (weights; moments), replicas sharing the bytes: a tensor
// sharded over TP is written by one DP replica of each shard, an unsharded one by one rank of the
// stage's TP × DP ranks, chosen greedily by bytes so every replica writes about as much. With
// ZeRO-1 each DP rank writes the moments of its own range, an unsharded tensor's by one TP rank.
// Tables of one stage must list the same entries with the same local sizes on every TP rank
// (they do: shards are equal), so every rank computes the same assignment without talking.
struct WriteAssignment {
  std::vector<bool> weights, moments;
};
// [moments_begin, moments_end): the flat range of the table's buffer this rank's moments hold.
WriteAssignment assign_writers(const ParamTable& table, const ShardRanks& ranks, bool zero1,
                               int64_t moments_begin, int64_t moments_end);

// What a rank saves: its table and buffers. Moment buffers hold flat range [begin, end) of the
// table's buffer (the whole of it, or ZeRO-1's range); null for a checkpoint of weights alone.
struct RankState {
  const ParamTable* table = nullptr;
  const FlatBuffer* weights = nullptr;
  const FlatBuffer* exp_avg = nullptr;
  const FlatBuffer* exp_avg_sq = nullptr;
  int64_t moments_begin = 0, moments_end = -1;
  bool zero1 = false;
  // The root's: the full tensors the checkpoint must hold, checked before it is committed.
  const ParamTable* full_table = nullptr;
};

// The small files the root writes beside the shards: text, and files copied in (a tokenizer).
struct RootFiles {
  std::vector<std::pair<std::string, std::string>> texts;   // file name, contents
  std::vector<std::pair<std::string, std::string>> copies;  // file name, source path
  nlohmann::json grid = nlohmann::json::object();           // for index.json
  // A file to name the checkpoint in once it is committed (a run's checkpoints/latest; "" for
  // none): written by the commit, so that every rank learns whether it was.
  std::string latest;
};

struct SaveResult {
  std::string dir;
  double stall_s = 0;   // this rank: what begin() blocked for (copying to the staging buffer)
  double write_s = 0;   // the slowest rank's writing and fsync
  double total_s = 0;   // begin() to the commit
  int64_t bytes = 0;    // written by every rank together
};

// Collective: checks that `dir` (--out) is one directory that every rank of `world` sees, as a
// sharded checkpoint needs (each rank writes its files into it, and rank 0 commits them): each
// rank writes a probe into it and rank 0 looks for them all. Throws Error on every rank, naming
// the ranks and hosts whose probes rank 0 does not see, otherwise.
void check_shared_directory(Communicator& world, const std::string& dir);

// --save-timeout's default: far beyond a healthy disk's time for any model this engine trains.
constexpr double kDefaultSaveTimeoutS = 1800;

class CheckpointSaver {
 public:
  // timeout_s: the bound on a save, from begin() to every rank's files written (0: none).
  CheckpointSaver(Communicator& world, ShardRanks ranks, bool async,
                  double timeout_s = kDefaultSaveTimeoutS);
  ~CheckpointSaver();
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  // Collective. Starts saving `state` as checkpoint directory `dir` (the root's `files` with it);
  // returns once this rank's pieces are staged (async) or the checkpoint is committed (sync: then
  // the result is returned). A save still pending is finished first.
  std::optional<SaveResult> begin(const std::string& dir, const RankState& state,
                                  RootFiles files);
  bool pending() const { return job_ != nullptr; }
  // The pending save's checkpoint directory and how long ago it began ("" and 0 when none).
  std::string pending_dir() const;
  double pending_age_s() const;
  // Collective (call on every rank at the same points, e.g. each step): commits the pending save
  // once every rank has written its files, and returns its result then. Throws Error on every rank
  // when a rank could not write (the earlier checkpoints stay intact); ends the job when the save
  // is past the timeout.
  std::optional<SaveResult> poll();
  // Collective: waits for the pending save and commits it (nullopt when none is pending).
  std::optional<SaveResult> finish();
  bool async() const { return async_; }
  // Allocates (and touches) the staging buffer for saves of `state` now, so that the first save
  // does not pay for it: the trainer calls it at start-up.
  void reserve(const RankState& state);
  // What the last begin() blocked this rank for (staging its pieces).
  double stall_s() const { return stall_s_; }

  struct Job;
  struct JobItem;
  struct ShareSource;

 private:
  static int64_t plan_share(const RankState& s, const ShardRanks& ranks,
                            const std::string& model_file, const std::string& optimizer_file,
                            std::vector<JobItem>& items, std::vector<ShareSource>& sources);
  std::optional<SaveResult> agree(bool wait);
  SaveResult commit();
  // Collective: the pending save is past the timeout on some rank; ends the job with rank 0's
  // message naming the ranks that have not finished.
  [[noreturn]] void end_overdue();
  // Rank 0: the temporary directory into place, then `latest` (throws on what fails).
  static void commit_into_place(Job& job);

  Communicator& world_;
  ShardRanks ranks_;
  bool async_;
  double timeout_s_;
  // The host copy of this rank's share: page-locked on a GPU, kept from one save to the next
  // (a save in flight owns it until it is committed).
  StagingBuffer staging_;
  double stall_s_ = 0;
  int saves_ = 0;  // begun by this process, for BOOSTLM_CHECKPOINT_FAULT's #N
  std::unique_ptr<Job> job_;
};

}  // namespace boostlm
