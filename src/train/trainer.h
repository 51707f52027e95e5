// The training loop: data, model, optimizer, schedule, evaluation, metrics and checkpoints.
//
// Every rank of the job runs this loop. Tensor parallelism lives inside the model (its layout);
// data parallelism is the loader's share of the global batch plus the gradient reducer; world
// rank 0 alone writes metrics and progress; every rank writes its share of each checkpoint.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/saver.h"
#include "comm/grid.h"
#include "comm/overlap.h"
#include "core/dtype.h"
#include "parallel/layout.h"
#include "train/optimizer.h"
#include "train/schedule.h"

namespace boostlm {

struct TrainOptions {
  std::string config_path;  // model preset; may be omitted when resuming or initialising
  std::string data_dir;     // from `boostlm prepare` (or its meta.json), or one token shard
  std::string out_dir;      // run directory: metrics.jsonl, checkpoints/
  std::string resume;       // checkpoint or run directory to continue bit-exactly
  std::string init_from;    // checkpoint whose weights start a fresh run
  bool overwrite = false;   // replace an earlier run in out_dir (its metrics and checkpoints)
  // Train a checkpoint (--resume, --init-from) on data of another tokenizer, with a warning.
  bool allow_tokenizer_change = false;
  int64_t vocab_size = 0;  // overrides the preset's when > 0
  // arch lax: override the config's gate ("kron", "linear") and σ switch ("on", "off"); "": keep.
  std::string lax_gate, lax_latent_act;

  GridShape grid;                    // TP × PP × DP; the job must have grid.world() ranks
  std::optional<LayoutKind> layout;  // default: dense-tp for dense, btp for low-rank
  int64_t bucket_mb = 16;            // DP gradient all-reduce bucket size
  BlockOptions block;                // BOOST's switches: --rmsnorm, --grouping, --recompute
  // --tp-overlap and --tp-overlap-chunks (comm/overlap.h): resolved into block.overlap_chunks
  // once the TP group exists.
  OverlapMode tp_overlap = OverlapMode::automatic;
  int tp_overlap_chunks = 2;
  int zero = 0;  // 1: ZeRO stage 1 (optimizer state sharded over DP)

  int64_t batch_size = 8;
  int64_t seq_len = 256;
  int64_t steps = 1000;  // total optimizer steps of the run
  // Length of the learning-rate schedule (0: --steps). Saved in checkpoints and kept on resume
  // unless given again, so a run can be continued in several parts on one schedule.
  int64_t schedule_steps = 0;
  int64_t grad_accum = 1;
  LrSchedule schedule;
  OptimizerConfig optimizer;
  DType precision = DType::f32;
  uint64_t seed = 1234;
  bool shuffle = false;

  int64_t eval_interval = 100;  // 0: only at the end
  int64_t eval_batches = 20;
  int64_t save_interval = 0;  // 0: only at the end
  int64_t keep_checkpoints = 2;
  // Checkpoints written in the background (checkpoint/saver.h): a step waits only while each rank
  // copies its shard to host memory.
  bool async_save = true;
  // A checkpoint that some rank has not written this many seconds after it began ends the job
  // (checkpoint/saver.h; 0: no bound).
  double save_timeout_s = kDefaultSaveTimeoutS;
  int64_t log_interval = 10;  // lines on a non-terminal stderr
  bool tensorboard = true;    // a TensorBoard event file beside metrics.jsonl (train/run_dir.h)
  bool progress = true;

  // The flags given on the command line, as the CLI spells them ("--lr"). On --resume these
  // override the checkpoint's saved settings and every other saved setting is restored
  // (train/run_settings.h); a caller that sets a field for a resume names its flag here.
  std::set<std::string> given;
};

struct TrainResult {
  int64_t steps_done = 0;
  float last_loss = 0;
  float val_loss = -1;  // < 0: no validation data
  double seconds = 0;
  std::string checkpoint;  // the last checkpoint written
  // Totals of this run's steps (a resumed run counts from where it resumed): tokens trained, the
  // time the steps took (not validation or the waits for saves), and from them the mean tokens/s
  // and MFU; checkpoints committed; the largest peak resident memory of any rank.
  int64_t tokens = 0;
  double step_seconds = 0;
  double tokens_per_s = 0, mfu = 0;
  int64_t checkpoints_written = 0;
  double peak_rss_mb = 0;
  bool interrupted = false;
  bool diverged = false;
};

TrainResult train(const TrainOptions& options);

// SIGINT, SIGTERM, SIGUSR1 and SIGURG (what `launch` and srun forward) become a request to save and
// stop, from this call on: cli/main.cpp makes it first thing for `train`, before MPI starts, so
// that a stop during start-up is not a death by the default action. A request made before the first
// step is honoured after it (that step is saved). Idempotent.
void install_stop_signal_handlers();

// What validation scores (train's val loss, eval --data, convert --data): the first `windows`
// windows of the evaluation sequence of `shards` (data/loader.h, EvalWindows: each shard's windows
// of batch_size·seq_len + 1 tokens from its token 0, one shard after the other).
struct EvalSet {
  std::vector<std::string> shards;  // the shards those windows come from, in order
  int64_t windows = 0;
};

// The first `asked` windows (--eval-batches) of the shards' sequence. When they hold fewer, a
// warning on stderr says how many shards, tokens and windows they hold and that those are
// scored, since no window is scored twice. Throws Error (naming the files) when they hold no
// window at all. With vocab_size > 0 every token of the chosen windows is read and checked below
// it, so that a bad validation shard is found before a run's first step, not hours into it.
EvalSet select_eval_windows(const std::vector<std::string>& shard_paths, int64_t batch_size,
                            int64_t seq_len, int64_t asked, int64_t vocab_size = 0);

// Mean loss over the windows of `set`, read (memory-mapped) as they are scored. Every rank that
// calls it scores every window, so DP replicas and pipeline stages agree on the value.
class Model;
double evaluate(Model& model, const EvalSet& set, int64_t batch_size, int64_t seq_len);

// The mean loss over every token of `tokens` after the first (at least 2 tokens; eval --text).
struct TokenScore {
  double loss = 0;        // mean over the scored tokens
  int64_t tokens = 0;     // targets scored: every token but the first
  int64_t sequences = 0;  // sequences (windows) they were scored in
};
// Every target after the first is scored once. With stride >= seq_len, in consecutive sequences
// of seq_len (batch_size at a time, then the rest in shorter ones), each token seeing only its
// sequence's earlier tokens. With
// stride < seq_len, in sliding windows of seq_len that advance by stride, one at a time: a window
// scores only the targets no earlier window scored, each with at least seq_len - stride tokens of
// context (Hugging Face's perplexity recipe). The loss has no per-token form, so a window's new
// targets are its whole loss less that of its already-scored prefix, run alone: causal attention
// gives those prefix targets the same values in both (up to rounding), two forwards a window.
TokenScore evaluate_every_token(Model& model, const std::vector<int32_t>& tokens,
                                int64_t batch_size, int64_t seq_len, int64_t stride);

}  // namespace boostlm
