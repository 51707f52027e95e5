#include "train/trainer.h"

#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/mpi_runtime.h"
#include "comm/watchdog.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/profile.h"
#include "core/threads.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "engine/data_parallel.h"
#include "engine/model.h"
#include "engine/pipeline.h"
#include "kernels/backend.h"
#include "kernels/gemm.h"
#include "kernels/gemm_measure.h"
#include "model/flops.h"
#include "train/checkpoint.h"
#include "train/memory_check.h"
#include "train/run_dir.h"
#include "train/run_options.h"
#include "train/run_settings.h"
#include "train/step.h"

namespace boostlm {

namespace fs = std::filesystem;

namespace {

// SIGINT and SIGTERM stop a run in one process; under `boostlm launch` the launcher turns either
// into SIGURG to mpirun (SIGUSR1 to srun), which passes it on to every rank (mpirun's own
// SIGINT/SIGTERM handling kills the ranks one second after asking them to stop: too soon to save
// a checkpoint). SIGURG's default action is to ignore it, so a rank that has not reached main
// drops it unharmed; the launcher sends it again until the job ends.
std::atomic<int> g_signal{0};
extern "C" void on_signal(int sig) {
  g_signal.store(sig);
}
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGUSR1, SIGURG};

sigset_t stop_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kStopSignals) sigaddset(&set, sig);
  return set;
}

// A stop signal pending for this thread or the process, taken without being delivered: the stop
// signals are blocked (install_stop_signal_handlers) and polled at each step's end, so no handler
// ever interrupts a kernel. (Delivered asynchronously, one SIGINT in about ten during a step was
// followed by heap corruption inside oneDNN, "corrupted size vs. prev_size": issue 37.)
bool poll_stop_signal() {
  const sigset_t set = stop_signal_set();
  const timespec now{0, 0};
  siginfo_t info;
  const int sig = sigtimedwait(&set, &info, &now);
  if (sig > 0) g_signal.store(sig);
  return g_signal.load() != 0;
}

}  // namespace

void install_stop_signal_handlers() {
  // The handler only stands in for a thread that does not block them (a library's own thread
  // that unblocks signals): it sets the flag, as the poll does.
  for (int sig : kStopSignals) std::signal(sig, on_signal);
  const sigset_t set = stop_signal_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // threads made after this inherit the mask
}

namespace {

double peak_rss_mb() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;
}

std::string format_duration(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

// Claims the run directory (world rank 0 only), clears what a crash left in it and opens its
// metrics (and with `event_file` a TensorBoard event file), dropping the lines of steps that a
// resumed run is about to redo.
MetricsLog open_run_directory(const fs::path& run, const ModelConfig& config,
                              const std::string& resume_dir, int64_t step, bool overwrite,
                              bool event_file) {
  claim_run_directory(run, resume_dir, overwrite);
  for (const std::string& action : clean_stale_temporaries(run))
    std::fprintf(stderr, "boostlm train: %s\n", action.c_str());
  record_run_owner(run);
  fs::create_directories(run / "checkpoints");
  write_file_atomically((run / "config.json").string(), config.to_json().dump(2) + "\n");
  MetricsLog log((run / "metrics.jsonl").string(), resume_dir.empty() ? -1 : step, event_file);
  if (log.dropped_lines() > 0)
    std::fprintf(stderr,
                 "boostlm train: %s: dropped %ld lines after step %ld (the steps since the "
                 "checkpoint, about to be rerun)\n",
                 log.path().c_str(), log.dropped_lines(), step);
  return log;
}

}  // namespace

namespace {

// Evaluation shards as a message names them: the path of one, or the first and last of several
// with their count, followed by the verb's matching form ("holds" or "hold").
std::string shards_hold(const std::vector<std::string>& paths) {
  if (paths.size() == 1) return paths.front() + " holds";
  return "the " + std::to_string(paths.size()) + " shards " + paths.front() + " ... " +
         paths.back() + " hold";
}

}  // namespace

EvalSet select_eval_windows(const std::vector<std::string>& shard_paths, int64_t batch_size,
                            int64_t seq_len, int64_t asked, int64_t vocab_size) {
  EvalWindows windows(shard_paths, batch_size, seq_len, vocab_size);
  const std::string window = std::to_string(batch_size) + "x" + std::to_string(seq_len) + "+1";
  const std::string held =
      shards_hold(shard_paths) + " " + std::to_string(windows.num_tokens()) + " tokens";
  if (windows.size() < 1)
    throw error(
        held, ", fewer than one window of ", window,
        shard_paths.size() > 1 ? " in any one of them (a window never crosses a shard)" : "");
  if (windows.size() < asked)
    warn(held + ": " + std::to_string(windows.size()) + " window(s) of " + window +
         (shard_paths.size() > 1 ? " (none crosses a shard)" : "") +
         ", fewer than --eval-batches " + std::to_string(asked) + "; scoring those " +
         std::to_string(windows.size()) + " (no window is scored twice)");
  const int64_t chosen = std::min(asked, windows.size());
  if (vocab_size > 0)  // reading a window checks its tokens
    for (int64_t i = 0; i < chosen; ++i) windows.window(i);
  return {windows.shards_holding(chosen), chosen};
}

double evaluate(Model& model, const EvalSet& set, int64_t batch_size, int64_t seq_len) {
  BOOSTLM_ASSERT_MSG(set.windows >= 1 && !set.shards.empty(), "evaluate needs a window to score");
  EvalWindows windows(set.shards, batch_size, seq_len, model.config().vocab_size);
  if (windows.size() < set.windows)
    throw error(shards_hold(set.shards), " ", windows.size(), " window(s) of ", batch_size, "x",
                seq_len, "+1 now, fewer than the ", set.windows,
                " chosen for evaluation; a shard must not change while it is evaluated");
  Pipeline pipeline(model);
  double total = 0;
  for (int64_t i = 0; i < set.windows; ++i) {
    ThreadGovernor::instance().tick();
    const Batch b = windows.window(i);
    total += pipeline.forward({b.inputs.data(), b.targets.data()}, batch_size, seq_len);
  }
  return total / static_cast<double>(set.windows);
}

TokenScore evaluate_every_token(Model& model, const std::vector<int32_t>& tokens,
                                int64_t batch_size, int64_t seq_len, int64_t stride) {
  const auto targets = static_cast<int64_t>(tokens.size()) - 1;
  BOOSTLM_ASSERT_MSG(targets >= 1 && batch_size >= 1 && seq_len >= 1 && stride >= 1,
                     "evaluate_every_token needs 2 tokens and a window shape");
  Pipeline pipeline(model);
  TokenScore score;
  double total = 0;
  // Rows of `length` targets from token `start`: inputs tokens[start, ...), targets one later.
  auto run = [&](int64_t start, int64_t rows, int64_t length) {
    ThreadGovernor::instance().tick();
    const float loss =
        pipeline.forward({tokens.data() + start, tokens.data() + start + 1}, rows, length);
    total += static_cast<double>(loss) * static_cast<double>(rows * length);
    score.tokens += rows * length;
    score.sequences += rows;
  };
  if (stride < seq_len && targets > seq_len) {
    // Sliding windows [start, end) of targets; [start, scored) was scored by the windows before.
    int64_t scored = 0;
    for (int64_t start = 0; scored < targets; start += stride) {
      ThreadGovernor::instance().tick();
      const int64_t end = std::min(start + seq_len, targets);
      const int64_t context = scored - start;  // targets of this window already scored
      const double whole =
          pipeline.forward({tokens.data() + start, tokens.data() + start + 1}, 1, end - start);
      double fresh = whole * static_cast<double>(end - start);
      if (context > 0)
        fresh -= static_cast<double>(pipeline.forward(
                     {tokens.data() + start, tokens.data() + start + 1}, 1, context)) *
                 static_cast<double>(context);
      total += fresh;
      score.tokens += end - scored;
      score.sequences += 1;
      scored = end;
    }
    score.loss = total / static_cast<double>(score.tokens);
    return score;
  }
  int64_t start = 0;
  for (; targets - start >= batch_size * seq_len; start += batch_size * seq_len)
    run(start, batch_size, seq_len);
  if (const int64_t rows = (targets - start) / seq_len; rows > 0) {
    run(start, rows, seq_len);
    start += rows * seq_len;
  }
  if (start < targets) run(start, 1, targets - start);
  score.loss = total / static_cast<double>(score.tokens);
  return score;
}

namespace {

// Per-step communication of one group, for the metrics line: {kind: {calls, bytes}}.
nlohmann::json comm_json(const CommCounts& counts) {
  nlohmann::json j = nlohmann::json::object();
  for (int k = 0; k < kCollectiveKinds; ++k) {
    const auto& c = counts.by_kind[k];
    if (c.calls)
      j[to_string(static_cast<Collective>(k))] = {{"calls", c.calls}, {"bytes", c.bytes}};
  }
  return j;
}

}  // namespace

namespace {

// What one optimizer step produced, for the metrics and the loop's decisions.
struct StepRecord {
  double loss = 0;  // mean over the job's micro-batches
  float lr = 0, grad_norm = 0;
  double seconds = 0;
  CommCounts tp, dp, pp;
  double overlap_wait_s = 0, overlap_hidden_s = 0;  // --tp-overlap's collectives (comm/overlap.h)
  PipelineTimes stages;
  bool finite = true, signalled = false;
  int threads = 1;  // the OpenMP team that ran it (core/threads.h)
  float peak_rss_mb = 0;  // the largest of every rank's peak resident memory
  // Where the device counts its launches (the emulated one): this rank's in the step, and of them
  // those replayed from CUDA graphs; -1 elsewhere.
  int64_t launches = -1, replayed = 0;
};

// A training run in pieces: the constructor sets it up (grid, checkpoint, data, model, optimizer,
// data parallelism, run directory), step() is one optimizer step, validate(), log() and save() do
// what their names say, and run() is the loop. Every rank of the job holds one; world rank 0
// alone writes the run directory.
class TrainingRun {
 public:
  explicit TrainingRun(const TrainOptions& options);
  TrainResult run();

 private:
  StepRecord step();
  float validate();
  void log(const StepRecord& record, bool evaluated, float val_loss, double start_s,
           int64_t first_step);
  // Begins a checkpoint of this step (every rank its share; `wait`: until it is committed) and
  // returns its directory; the one in flight is finished first.
  std::string save(const char* why, bool wait);
  // What a committed save leaves to world rank 0: `latest`, pruning, the message, the metrics.
  void settle(const std::optional<SaveResult>& committed);
  // Runs one of the saver's collectives, naming the checkpoint and the last good one on failure.
  std::optional<SaveResult> saving(const std::function<std::optional<SaveResult>()>& call);
  RankState rank_state() const;  // what this rank saves
  void restore(const std::string& resume_dir, const std::string& init_dir);
  // Where the model's config came from, for the banner: --config, else the checkpoint's.
  std::string model_source() const {
    if (!o_.config_path.empty()) return o_.config_path;
    return "(config of " + (resume_dir_.empty() ? init_dir_ : resume_dir_) + ")";
  }

  ResolvedOptions resolved_;  // first: the other members are built from its options
  const TrainOptions& o_;     // resolved_.options
  ProcessGrid grid_;
  bool root_;
  std::string resume_dir_, init_dir_;
  ModelConfig config_;
  DataFiles data_;
  std::unique_ptr<BatchSource> loader_;
  std::optional<Model> model_;
  std::optional<Pipeline> pipeline_;
  std::optional<ZeroStage1> zero_;
  std::optional<AdamW> optimizer_;
  std::optional<GradReducer> reducer_;
  std::optional<CheckpointSaver> saver_;
  std::string saving_dir_;      // the checkpoint in flight
  std::string saving_why_;
  int64_t saved_step_ = -1;     // the step of the last checkpoint begun
  nlohmann::json save_note_;    // for the next metrics line: saves begun and committed
  TrainingState state_;
  LrSchedule schedule_;
  fs::path run_dir_;
  RunDirectoryLock lock_;
  MetricsLog metrics_;
  double step_flops_ = 0, peak_gflops_ = 0;
  int64_t tokens_per_step_ = 0;
  bool tty_ = false;
  std::string last_checkpoint_;
  int64_t checkpoints_written_ = 0;  // committed in this run

  bool use_zero() const { return o_.zero == 1; }
  // The reducer where there is something to reduce: with one DP rank the step has no
  // data-parallel work (and so may be one CUDA graph, train/step.h); ZeRO-1 keeps its partition.
  DataParallelStep dp_step() {
    const bool reduce = !use_zero() && grid_.dp().size() > 1;
    return {reduce ? &*reducer_ : nullptr, use_zero() ? &*zero_ : nullptr, &grid_.dp()};
  }
};

// The options are checked and resolved before the grid starts: a resume may restore its sizes.
TrainingRun::TrainingRun(const TrainOptions& given)
    : resolved_(resolve_options(given)), o_(resolved_.options), grid_(o_.grid) {
  const TrainOptions& o = o_;
  root_ = grid_.world_rank() == 0;
  resume_dir_ = resolved_.resume_dir;
  init_dir_ = o.init_from.empty() ? "" : resolve_checkpoint(o.init_from);
  if (!init_dir_.empty()) verify_checkpoint(init_dir_);
  config_ = resolve_config(o, resume_dir_.empty() ? init_dir_ : resume_dir_);
  data_ = open_data(o.data_dir, config_, o);
  check_data_tokenizer(resume_dir_.empty() ? init_dir_ : resume_dir_, o);
  check_memory_fits(estimate_rank_memory(o, config_, o.layout.value_or(default_layout(config_)),
                                         loader_resident_tokens(data_)),
                    ranks_on_this_machine(), available_memory_bytes(), o);

  LoaderConfig loader_config;
  loader_config.batch_size = o.batch_size;
  loader_config.seq_len = o.seq_len;
  loader_config.dp_rank = grid_.dp_rank();
  loader_config.dp_size = grid_.shape().dp;
  loader_config.shuffle = o.shuffle;
  loader_config.seed = o.seed;
  loader_ = open_loader(data_, loader_config, config_.vocab_size);

  if (o.zero != 0 && o.zero != 1) throw error("--zero ", o.zero, ": only stage 1 is implemented");
  // A pipeline stage keeps the activations of the micro-batches in flight in 1F1B.
  BlockOptions block = o.block;
  block.overlap_chunks = overlap_chunks(o.tp_overlap, o.tp_overlap_chunks, grid_.tp());
  // Where the backend chooses a precision's GEMM path by measuring (the CPU's bf16), every rank
  // takes rank 0's: measured apart, ranks on a loaded machine could choose differently and sum in
  // different orders what they must agree on.
  int path = gemm_path(o.precision);
  grid_.world().broadcast_bytes(&path, sizeof path, 0);
  set_gemm_path(o.precision, path);
  model_.emplace(config_, o.precision, o.layout, &grid_.tp(), block, &grid_.pp(),
                 Pipeline::micro_slots(grid_.shape().pp, grid_.pp_rank(), o.grad_accum));
  pipeline_.emplace(*model_);
  // ZeRO-1: this DP rank owns a range of the flat buffer and the optimizer state for it only.
  const int64_t elements = model_->params().total_elements();
  zero_.emplace(elements, grid_.dp());
  optimizer_.emplace(model_->params(), o.optimizer, use_zero() ? zero_->begin() : 0,
                     use_zero() ? zero_->end() : -1);
  reducer_.emplace(model_->params(), config_.n_layers, model_->grads(), grid_.dp(),
                   o.bucket_mb << 20);
  saver_.emplace(grid_.world(),
                 ShardRanks{grid_.tp_rank(), grid_.shape().tp, grid_.pp_rank(), grid_.shape().pp,
                            grid_.dp_rank(), grid_.shape().dp},
                 o.async_save, o.save_timeout_s);
  restore(resume_dir_, init_dir_);
  saver_->reserve(rank_state());  // the staging buffer, allocated and touched before step 1
  if (state_.step >= o.steps)
    throw error("the checkpoint is already at step ", state_.step, " of --steps ", o.steps,
                ": give a larger --steps to train on");
  schedule_ = resolve_schedule(o);

  run_dir_ = o.out_dir;
  // A testing hook, BOOSTLM_TEST_RANK_OUT=RANK:DIR: world rank RANK writes to DIR instead, as a
  // node whose --out is a disk of its own would (two hosts cannot always be had: faults CTest).
  if (const char* hook = std::getenv("BOOSTLM_TEST_RANK_OUT");
      hook && std::strchr(hook, ':') && std::atoi(hook) == grid_.world_rank()) {
    run_dir_ = std::strchr(hook, ':') + 1;
    fs::create_directories(run_dir_ / "checkpoints");
  }
  if (root_) {
    while_doing("creating the run directory --out " + run_dir_.string(), [&] {
      lock_ = RunDirectoryLock(run_dir_);
      metrics_ = open_run_directory(run_dir_, config_, resume_dir_, state_.step, o.overwrite,
                                    o.tensorboard);
    });
  }
  // Every rank writes its share of each checkpoint into the run directory, which rank 0 then
  // commits: refused now, not at the first save or the resume, when the ranks do not share it.
  while_doing("checking that every rank sees --out " + run_dir_.string(),
              [&] { check_shared_directory(grid_.world(), run_dir_.string()); });
  set_watchdog_log((run_dir_ / "watchdog.log").string());  // every rank: mpirun may lose stderr
  // Model FLOPs of the whole job's step (every DP replica), against every rank's GEMM peak.
  step_flops_ =
      model_flops(config_, o.batch_size, o.seq_len).training() * o.grad_accum * grid_.shape().dp;
  peak_gflops_ = measure_peak_gemm_gflops(o.precision) * grid_.shape().world();
  tokens_per_step_ = o.batch_size * o.seq_len * o.grad_accum * grid_.shape().dp;
  tty_ = root_ && o.progress && ::isatty(STDERR_FILENO);
}

void TrainingRun::restore(const std::string& resume_dir, const std::string& init_dir) {
  if (!resume_dir.empty()) {
    load_checkpoint_weights(resume_dir, *model_);
    // Each rank reads the pieces it holds: its shards' moments, under ZeRO-1 its range of them.
    load_training_state(resume_dir, *optimizer_, state_);
    loader_->load_state(state_.loader);
  } else if (!init_dir.empty()) {
    load_checkpoint_weights(init_dir, *model_);
  } else {
    model_->init_weights(o_.seed);
  }
}

StepRecord TrainingRun::step() {
  StepRecord r;
  ThreadGovernor::instance().tick();
  r.threads = ThreadGovernor::instance().threads();
  const double t0 = now_s();
  const CommOverlap::Stats overlap_before =
      model_->overlap() ? model_->overlap()->stats() : CommOverlap::Stats{};
  const CommCounts tp_before = grid_.tp().counts(), dp_before = grid_.dp().counts(),
                   pp_before = grid_.pp().counts();
  uint64_t launches_before = 0, replayed_before = 0;
  const bool counted = device_launch_totals(&launches_before, &replayed_before);
  std::vector<Batch> batches;
  std::vector<MicroBatch> micro;
  for (int64_t i = 0; i < o_.grad_accum; ++i) batches.push_back(loader_->next());
  for (const Batch& b : batches) micro.push_back({b.inputs.data(), b.targets.data()});
  // On GPUs with graphs: the whole step is one graph (train/step.h).
  r.lr = schedule_.at(state_.step);
  const bool whole = whole_step_possible(*pipeline_, *optimizer_, micro, dp_step());
  float whole_norm = 0;
  const double loss =
      whole ? whole_step(*pipeline_, *optimizer_, micro, o_.batch_size, o_.seq_len, r.lr,
                         dp_step(), &whole_norm)
            : accumulate_gradients(*pipeline_, micro, o_.batch_size, o_.seq_len, dp_step());
  // Control data over the world: the mean loss over DP replicas, and whether any rank was
  // signalled (so every rank saves and stops at the same step).
  double control[2] = {loss / static_cast<double>(o_.grad_accum), poll_stop_signal() ? 1.0 : 0.0};
  grid_.world().all_reduce_host(control, 2);
  r.loss = control[0] / grid_.shape().world();
  r.signalled = control[1] > 0;
  r.grad_norm = whole ? whole_norm : apply_gradients(*model_, *optimizer_, r.lr, r.loss, dp_step());
  r.finite = std::isfinite(r.loss) && std::isfinite(r.grad_norm);
  r.seconds = now_s() - t0;
  if (uint64_t launches = 0, replayed = 0; counted && device_launch_totals(&launches, &replayed)) {
    r.launches = static_cast<int64_t>(launches - launches_before);
    r.replayed = static_cast<int64_t>(replayed - replayed_before);
  }
  // Each group's whole step (a graph of it counts its norm's sum too).
  r.tp = grid_.tp().counts() - tp_before;
  r.pp = grid_.pp().counts() - pp_before;
  r.stages = pipeline_->gather_times();  // for the metrics (host timings: not the step's traffic)
  if (model_->overlap()) {
    const CommOverlap::Stats& now = model_->overlap()->stats();
    r.overlap_wait_s = now.wait_s - overlap_before.wait_s;
    r.overlap_hidden_s = now.hidden_s() - overlap_before.hidden_s();
  }
  r.dp = grid_.dp().counts() - dp_before;
  r.peak_rss_mb = static_cast<float>(peak_rss_mb());
  grid_.world().all_reduce_max_host(&r.peak_rss_mb, 1);  // the largest rank's
  return r;
}

// The validation windows were chosen and checked up front; should evaluation fail anyway (a file
// changed under the run), the trained weights are saved before the run ends.
float TrainingRun::validate() {
  if (data_.val.shards.empty()) return -1.0f;
  std::string failure;
  float loss = -1.0f;
  try {
    // A testing hook, BOOSTLM_TEST_EVAL_FAULT=RANK: validation fails on that world rank only.
    if (const char* hook = std::getenv("BOOSTLM_TEST_EVAL_FAULT");
        hook && *hook && std::atoi(hook) == grid_.world_rank())
      throw error("BOOSTLM_TEST_EVAL_FAULT: validation fails on rank ", grid_.world_rank());
    loss = static_cast<float>(evaluate(*model_, data_.val, o_.batch_size, o_.seq_len));
  } catch (const Error& e) {
    failure = e.what();
  }
  // Every rank learns of a failure on any rank before the save it triggers, which every rank
  // must join: a save begun by some ranks only would wait for the others until the watchdog
  // fired. The message is the failing rank's (the highest, should several fail).
  float failed_rank = failure.empty() ? -1.0f : static_cast<float>(grid_.world_rank());
  grid_.world().all_reduce_max_host(&failed_rank, 1);
  if (failed_rank < 0) return loss;
  grid_.world().broadcast_text(failure, static_cast<int>(failed_rank));
  const std::string saved = save("validation failed", true);
  throw error(failure, " (the trained weights are saved in ", saved, ")");
}

void TrainingRun::log(const StepRecord& r, bool evaluated, float val_loss, double start_s,
                      int64_t first_step) {
  if (!root_) {
    save_note_ = nlohmann::json();
    return;
  }
  const double mfu = step_flops_ / r.seconds / (peak_gflops_ * 1e9);
  nlohmann::json line = {
      {"step", state_.step},
      {"loss", r.loss},
      {"lr", r.lr},
      {"grad_norm", r.grad_norm},
      {"step_ms", r.seconds * 1e3},
      {"tokens_per_s", tokens_per_step_ / r.seconds},
      {"threads", r.threads},
      {"mfu", mfu},
      {"tokens_seen", state_.tokens_seen},
      {"peak_rss_mb", peak_rss_mb()},
      {"peak_rss_mb_max", r.peak_rss_mb},
      {"activation_mb", model_->activation_bytes() / 1e6},
      {"optimizer_state_mb", 2.0 * (optimizer_->end() - optimizer_->begin()) * 4 / 1e6},
      {"comm", {{"tp", comm_json(r.tp)}, {"dp", comm_json(r.dp)}, {"pp", comm_json(r.pp)}}}};
  if (r.launches >= 0) line["device"] = {{"launches", r.launches}, {"replayed", r.replayed}};
  if (model_->overlap())  // TP collectives: waited for, and in flight while another chunk computed
    line["tp_overlap"] = {{"chunks", model_->overlap_chunks()},
                          {"wait_ms", r.overlap_wait_s * 1e3},
                          {"hidden_ms", r.overlap_hidden_s * 1e3}};
  const int pp = grid_.shape().pp;
  if (pp > 1) {
    line["pipeline"] = {
        {"micro_batches", o_.grad_accum},
        {"time_ms", r.stages.span_s * 1e3},
        {"bubble_fraction_1f1b", PipelineTimes::one_f_one_b_fraction(pp, o_.grad_accum)}};
    if (r.stages.graphed) {
      // One graph a step (train/step.h): the stages' compute and bubble are not told apart.
      line["pipeline"]["graphed"] = true;
    } else {
      nlohmann::json stages = nlohmann::json::array();
      for (int s = 0; s < pp; ++s)
        stages.push_back({{"compute_ms", r.stages.compute_s[s] * 1e3},
                          {"bubble_ms", r.stages.bubble_s(s) * 1e3}});
      line["pipeline"]["stages"] = stages;
      line["pipeline"]["bubble_fraction"] = r.stages.bubble_fraction();
    }
  }
  if (evaluated && val_loss >= 0) line["val_loss"] = val_loss;
  if (!save_note_.is_null()) line.update(save_note_);
  save_note_ = nlohmann::json();
  // A save in flight, and for how long: a stuck disk shows here long before --save-timeout.
  const std::string pending = fs::path(saver_->pending_dir()).filename().string();
  const double pending_s = saver_->pending_age_s();
  if (saver_->pending()) line["save_pending"] = {{"checkpoint", pending}, {"age_s", pending_s}};
  metrics_.append(line);

  const double eta = (now_s() - start_s) / (state_.step - first_step) * (o_.steps - state_.step);
  char progress[320];
  const int n = std::snprintf(
      progress, sizeof progress,
      "step %ld/%ld | loss %.4f | lr %.2e | gnorm %.2f | %.0f tok/s | MFU %.1f%% | mem %.0f MB | "
      "ETA %s",
      state_.step, o_.steps, r.loss, r.lr, r.grad_norm, tokens_per_step_ / r.seconds, 100.0 * mfu,
      r.peak_rss_mb, format_duration(eta).c_str());
  if (saver_->pending() && n > 0 && static_cast<size_t>(n) < sizeof progress)
    std::snprintf(progress + n, sizeof progress - static_cast<size_t>(n), " | saving %s (%s)",
                  pending.c_str(), format_duration(pending_s).c_str());
  if (tty_)
    std::fprintf(stderr, "\r%-124s", progress);
  else if (state_.step % std::max<int64_t>(1, o_.log_interval) == 0 || state_.step == o_.steps)
    std::fprintf(stderr, "%s\n", progress);
  if (evaluated && val_loss >= 0)
    std::fprintf(stderr, "%sstep %ld: val loss %.4f\n", tty_ ? "\n" : "", state_.step, val_loss);
}

RankState TrainingRun::rank_state() const {
  RankState state;
  const Model& model = *model_;  // const: handing out the weights for writing dirties bf16's copy
  state.table = &model.params();
  state.weights = &model.weights();
  state.exp_avg = &optimizer_->first_moment();
  state.exp_avg_sq = &optimizer_->second_moment();
  state.moments_begin = optimizer_->begin();
  state.moments_end = optimizer_->end();
  state.zero1 = use_zero();
  state.full_table = root_ ? &model.full_params() : nullptr;
  return state;
}

std::optional<SaveResult> TrainingRun::saving(
    const std::function<std::optional<SaveResult>()>& call) {
  try {
    return call();
  } catch (const std::exception& e) {  // an Error, or one process's own filesystem error
    const std::string last = latest_checkpoint_name(run_dir_ / "checkpoints");
    throw error("cannot save checkpoint ", saving_dir_, ": ", e.what(), ". ",
                last.empty() ? std::string("No earlier checkpoint of this run exists.")
                             : "The last good checkpoint, " + last + ", is intact.");
  }
}

void TrainingRun::settle(const std::optional<SaveResult>& done) {
  if (!done) return;
  const fs::path dir(done->dir);
  last_checkpoint_ = done->dir;
  ++checkpoints_written_;
  save_note_["save_committed"].push_back({{"checkpoint", dir.filename().string()},
                                          {"write_ms", done->write_s * 1e3},
                                          {"total_ms", done->total_s * 1e3},
                                          {"bytes", done->bytes}});
  // The commit wrote `latest`; rank 0 prunes, and every rank learns whether that failed (an
  // error on rank 0 alone would leave the others waiting in the next collective).
  std::string failure;
  if (root_) {
    try {
      prune_checkpoints(dir.parent_path(), o_.keep_checkpoints, dir.filename().string());
    } catch (const std::exception& e) {
      failure = std::string("removing older checkpoints (--keep) after committing ") + done->dir +
                ": " + e.what();
    }
  }
  grid_.world().broadcast_text(failure, 0);
  if (!failure.empty()) throw error(failure);
  if (!root_) return;
  if (tty_) std::fprintf(stderr, "\n");
  std::fprintf(stderr, "checkpoint (%s): %s\n", saving_why_.c_str(), done->dir.c_str());
}

std::string TrainingRun::save(const char* why, bool wait) {
  const double waited_from = now_s();
  settle(saving([&] { return saver_->finish(); }));  // one save in flight at a time
  const double waited = now_s() - waited_from;
  char name[32];
  std::snprintf(name, sizeof name, "step_%06ld", state_.step);
  const fs::path dir = run_dir_ / "checkpoints" / name;
  if (saved_step_ == state_.step) return dir.string();  // this step is saved already
  RootFiles files;
  if (root_) {
    state_.loader = loader_->state();
    TrainOptions settings = o_;  // as resolved: a resume restores exactly what ran
    settings.layout = model_->layout();
    settings.schedule_steps = schedule_.total_steps;
    settings.grid = grid_.shape();
    state_.extra = saved_run_settings(settings);
    state_.extra["arch"] = to_string(config_.arch);
    files = checkpoint_root_files(config_, nlohmann::json(), data_.tokenizer, &state_,
                                  optimizer_->steps_taken());
    files.latest = (run_dir_ / "checkpoints" / "latest").string();
    files.grid = {{"tp", grid_.shape().tp},
                  {"pp", grid_.shape().pp},
                  {"dp", grid_.shape().dp},
                  {"zero", o_.zero},
                  {"layout", to_string(model_->layout())}};
  }
  const RankState state = rank_state();
  saving_dir_ = dir.string();
  saving_why_ = why;
  saved_step_ = state_.step;
  // The stall: what the loop waits for (the copy to host memory; synchronous, the whole save).
  const double t0 = now_s();
  settle(saving([&] { return saver_->begin(dir.string(), state, std::move(files)); }));
  save_note_["save"] = {{"checkpoint", name},
                        {"async", saver_->async()},
                        {"stall_ms", (now_s() - t0) * 1e3},
                        {"wait_ms", waited * 1e3}};  // for the save before it to finish
  if (wait) settle(saving([&] { return saver_->finish(); }));
  return dir.string();
}

TrainResult TrainingRun::run() {
  if (root_)
    std::fprintf(stderr,
                 "boostlm train: %s %s, %.2fM parameters, %s (GEMM: %s), layout %s, tp %d x pp "
                 "%d x dp %d, %ld tokens/step, steps %ld..%ld, %d thread%s per rank%s\n",
                 to_string(config_.arch).c_str(), model_source().c_str(),
                 model_->full_params().parameter_count() / 1e6, to_string(o_.precision).c_str(),
                 gemm_engine(o_.precision), to_string(model_->layout()).c_str(), grid_.shape().tp,
                 grid_.shape().pp, grid_.shape().dp, tokens_per_step_, state_.step, o_.steps,
                 omp_get_max_threads(), omp_get_max_threads() == 1 ? "" : "s",
                 ThreadGovernor::instance().describe().c_str());
  // Not cleared here: a stop asked for during start-up is honoured after the first step.
  std::vector<void (*)(int)> old_handlers;
  for (int sig : kStopSignals) old_handlers.push_back(std::signal(sig, on_signal));
  sigset_t old_mask;
  const sigset_t stop_set = stop_signal_set();
  pthread_sigmask(SIG_BLOCK, &stop_set, &old_mask);

  TrainResult result;
  const double start = now_s();
  const int64_t first_step = state_.step;
  // A testing hook, BOOSTLM_TEST_STEP_SLEEP_MS=MS: each rank sleeps MS after every step, so a run
  // lasts long in wall time on few steps and little CPU (slurm_jobs: a job that must outlast
  // Slurm's time-limit warning, and the reference it is compared with then needs fewer steps).
  const char* sleep_hook = std::getenv("BOOSTLM_TEST_STEP_SLEEP_MS");
  const auto step_sleep = std::chrono::milliseconds(sleep_hook ? std::atoi(sleep_hook) : 0);
  while (state_.step < o_.steps) {
    set_watchdog_step(state_.step + 1);  // for the watchdog's message, numbered as in the metrics
    const StepRecord r = step();
    if (!r.finite) {
      if (root_) {
        if (tty_) std::fprintf(stderr, "\n");
        std::fprintf(
            stderr,
            "boostlm train: step %ld: %s is %f; stopping without saving. The last good "
            "checkpoint is %s\n",
            state_.step, std::isfinite(r.loss) ? "the gradient norm" : "the loss",
            std::isfinite(r.loss) ? r.grad_norm : r.loss,
            last_checkpoint_.empty() ? "(none written in this run)" : last_checkpoint_.c_str());
      }
      result.diverged = true;
      break;
    }
    state_.step += 1;
    state_.tokens_seen += tokens_per_step_;
    result.tokens += tokens_per_step_;
    result.step_seconds += r.seconds;
    result.peak_rss_mb = std::max<double>(result.peak_rss_mb, r.peak_rss_mb);
    result.last_loss = static_cast<float>(r.loss);
    const bool evaluate_now =
        (o_.eval_interval > 0 && state_.step % o_.eval_interval == 0) || state_.step == o_.steps;
    if (evaluate_now) result.val_loss = validate();
    // A save in flight is committed once every rank has written it (a small collective).
    settle(saving([&] { return saver_->poll(); }));
    // An interrupt or the end waits for its checkpoint; an interval save goes on in the background.
    if (r.signalled)
      save("interrupted", true);
    else if (state_.step == o_.steps)
      save("final", true);
    else if (o_.save_interval > 0 && state_.step % o_.save_interval == 0)
      save("interval", false);
    log(r, evaluate_now, result.val_loss, start, first_step);
    if (r.signalled) {
      result.interrupted = true;
      break;
    }
    if (step_sleep.count() > 0) std::this_thread::sleep_for(step_sleep);
  }
  settle(saving([&] { return saver_->finish(); }));  // a diverged run keeps its last good one
  if (tty_) std::fprintf(stderr, "\n");
  poll_stop_signal();  // taken, so that unblocking below does not deliver it
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  for (size_t i = 0; i < std::size(kStopSignals); ++i)
    std::signal(kStopSignals[i], old_handlers[i]);
  g_signal.store(0);  // this run's request is spent
  result.checkpoint = last_checkpoint_;
  result.steps_done = state_.step;
  result.seconds = now_s() - start;
  result.checkpoints_written = checkpoints_written_;
  if (result.step_seconds > 0) {
    const double steps = static_cast<double>(result.tokens) / tokens_per_step_;
    result.tokens_per_s = result.tokens / result.step_seconds;
    result.mfu = step_flops_ * steps / result.step_seconds / (peak_gflops_ * 1e9);
  }
  if (root_)
    std::fprintf(stderr,
                 "boostlm train: %ld tokens in %s (steps %s): %.0f tok/s, MFU %.1f%%, %ld "
                 "checkpoint%s, peak memory %.0f MB (largest rank)\n",
                 result.tokens, format_duration(result.seconds).c_str(),
                 format_duration(result.step_seconds).c_str(), result.tokens_per_s,
                 100.0 * result.mfu, result.checkpoints_written,
                 result.checkpoints_written == 1 ? "" : "s", result.peak_rss_mb);
  return result;
}

}  // namespace

TrainResult train(const TrainOptions& options) {
  TrainingRun run(options);
  return run.run();
}

}  // namespace boostlm
