#include "train/trainer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "comm/watchdog.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/profile.h"
#include "data/loader.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "kernels/gemm.h"
#include "model/flops.h"
#include "model/model.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline.h"
#include "train/checkpoint.h"
#include "train/memory_check.h"
#include "train/run_dir.h"

namespace boostlm {

namespace fs = std::filesystem;

namespace {

std::atomic<int> g_signal{0};
extern "C" void on_signal(int sig) {
  g_signal.store(sig);
}

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

ModelConfig resolve_config(const TrainOptions& o, const std::string& checkpoint) {
  ModelConfig config;
  if (!checkpoint.empty()) {
    config = read_checkpoint_config(checkpoint);
    if (!o.config_path.empty()) {
      ModelConfig given = ModelConfig::load(o.config_path);
      if (o.vocab_size > 0) given.vocab_size = o.vocab_size;
      if (given.to_json() != config.to_json())
        throw error("--config ", o.config_path, " does not match the checkpoint's config.json (",
                    config.to_json().dump(), "); omit --config to use the checkpoint's");
    }
  } else {
    if (o.config_path.empty()) throw error("--config is required (a preset under configs/)");
    config = ModelConfig::load(o.config_path);
    if (o.vocab_size > 0) {
      config.vocab_size = o.vocab_size;
      config.validate();
    }
  }
  if (o.seq_len > config.max_seq_len)
    throw error("--seq-len ", o.seq_len, " exceeds the model's max_seq_len=", config.max_seq_len);
  return config;
}

// An evaluation shard's tokens, checked against the model and the window before any use.
std::vector<int32_t> read_eval_shard(const std::string& path, int64_t vocab_size,
                                     int64_t batch_size, int64_t seq_len) {
  std::vector<int32_t> tokens = read_shard(path);
  check_tokens_below(tokens, vocab_size, path);
  if (DataLoader::full_windows(static_cast<int64_t>(tokens.size()), batch_size, seq_len) < 1)
    throw error(path, " holds ", tokens.size(), " tokens, fewer than one window of ", batch_size,
                "x", seq_len, "+1");
  return tokens;
}

// The data directory's shards and tokenizer, all checked against the model and the batch shape
// before the first step, so a bad validation shard cannot end a run after hours of training.
struct DataFiles {
  std::string train, val, tokenizer;
};

DataFiles open_data(const std::string& dir, const ModelConfig& config, const TrainOptions& o) {
  DataFiles f;
  f.train = (fs::path(dir) / "train.bin").string();
  if (!fs::exists(f.train))
    throw error("--data ", dir, " has no train.bin (run `boostlm prepare` first)");
  const fs::path val = fs::path(dir) / "val.bin", tok = fs::path(dir) / "tokenizer.model";
  if (fs::exists(tok)) {  // first: a vocabulary mismatch explains bad tokens in the shards
    f.tokenizer = tok.string();
    const int64_t vocab = Tokenizer::load(f.tokenizer).vocab_size();
    if (vocab > config.vocab_size)
      throw error("the tokenizer ", f.tokenizer, " has ", vocab,
                  " tokens but the model's vocab_size is ", config.vocab_size,
                  " (use a preset with a larger vocabulary or --vocab-size ", vocab, ")");
  } else {
    warn("--data " + dir + " has no tokenizer.model: checkpoints will carry no tokenizer, so " +
         "generate will need --tokenizer");
  }
  if (fs::exists(val)) {
    f.val = val.string();
    read_eval_shard(f.val, config.vocab_size, o.batch_size, o.seq_len);
  }
  return f;
}

void check_range(bool ok, const char* option, double value, const char* allowed) {
  if (!ok) throw error(option, " ", value, " is out of range: ", allowed);
}

// Every option checked before anything is read or allocated, with the range it may take.
void check_options(const TrainOptions& o) {
  check_range(o.batch_size > 0, "--batch-size", o.batch_size, "at least 1");
  check_range(o.seq_len > 0, "--seq-len", o.seq_len, "at least 1");
  check_range(o.steps > 0, "--steps", o.steps, "at least 1");
  check_range(o.grad_accum > 0, "--grad-accum", o.grad_accum, "at least 1");
  check_range(o.schedule_steps >= 0, "--schedule-steps", o.schedule_steps,
              "at least 1 (0: the run's --steps)");
  check_range(o.eval_interval >= 0, "--eval-interval", o.eval_interval, "0 (end only) or more");
  check_range(o.eval_batches > 0, "--eval-batches", o.eval_batches, "at least 1");
  check_range(o.save_interval >= 0, "--save-interval", o.save_interval, "0 (end only) or more");
  check_range(o.keep_checkpoints > 0, "--keep", o.keep_checkpoints, "at least 1");
  check_range(o.log_interval > 0, "--log-interval", o.log_interval, "at least 1");
  check_range(o.bucket_mb > 0, "--bucket-mb", o.bucket_mb, "at least 1");
  const OptimizerConfig& a = o.optimizer;
  check_range(a.beta1 >= 0 && a.beta1 < 1, "--beta1", a.beta1, "[0, 1)");
  check_range(a.beta2 >= 0 && a.beta2 < 1, "--beta2", a.beta2, "[0, 1)");
  check_range(std::isfinite(a.eps) && a.eps > 0, "--adam-eps", a.eps, "a positive number");
  check_range(std::isfinite(a.weight_decay) && a.weight_decay >= 0, "--weight-decay",
              a.weight_decay, "0 or a positive number");
  check_range(std::isfinite(a.grad_clip) && a.grad_clip >= 0, "--grad-clip", a.grad_clip,
              "0 (off) or a positive number");
  if (!o.resume.empty() && !o.init_from.empty())
    throw error("--resume and --init-from are exclusive");
  LrSchedule schedule = o.schedule;
  schedule.total_steps = o.steps;
  schedule.validate();
}

// The schedule's length is a setting of the run, saved in its checkpoints: a resumed run keeps
// it unless --schedule-steps changes it, so N steps and then M more give the losses of N+M steps
// in one run whenever both runs were given the same schedule.
LrSchedule resolve_schedule(const TrainOptions& o, const TrainingState* resumed, bool root) {
  LrSchedule schedule = o.schedule;
  schedule.total_steps = o.schedule_steps > 0 ? o.schedule_steps : o.steps;
  if (resumed) {
    const auto saved = resumed->extra.find("schedule_steps");
    if (saved == resumed->extra.end()) {
      if (root)
        std::fprintf(stderr,
                     "boostlm train: the checkpoint predates saved schedule lengths; the "
                     "learning-rate schedule spans %ld steps\n",
                     schedule.total_steps);
    } else {
      const int64_t saved_steps = saved->get<int64_t>();
      if (o.schedule_steps == 0) schedule.total_steps = saved_steps;
      if (root && schedule.total_steps != saved_steps)
        std::fprintf(stderr,
                     "boostlm train: --schedule-steps %ld re-lays the learning-rate schedule "
                     "(the checkpoint's spans %ld steps)\n",
                     schedule.total_steps, saved_steps);
      else if (root && saved_steps != o.steps)
        std::fprintf(stderr,
                     "boostlm train: keeping the checkpoint's learning-rate schedule of %ld steps "
                     "(--schedule-steps changes it)\n",
                     saved_steps);
    }
  }
  schedule.validate();
  return schedule;
}

// Claims the run directory (world rank 0 only), clears what a crash left in it and opens its
// metrics, dropping the lines of steps that a resumed run is about to redo.
MetricsLog open_run_directory(const fs::path& run, const ModelConfig& config,
                              const std::string& resume_dir, int64_t step, bool overwrite) {
  claim_run_directory(run, resume_dir, overwrite);
  for (const std::string& action : clean_stale_temporaries(run))
    std::fprintf(stderr, "boostlm train: %s\n", action.c_str());
  fs::create_directories(run / "checkpoints");
  write_file_atomically((run / "config.json").string(), config.to_json().dump(2) + "\n");
  MetricsLog log((run / "metrics.jsonl").string(), resume_dir.empty() ? -1 : step);
  if (log.dropped_lines() > 0)
    std::fprintf(stderr,
                 "boostlm train: %s: dropped %ld lines after step %ld (the steps since the "
                 "checkpoint, about to be rerun)\n",
                 log.path().c_str(), log.dropped_lines(), step);
  return log;
}

}  // namespace

double evaluate(Model& model, const std::string& shard_path, int64_t batch_size, int64_t seq_len,
                int64_t batches) {
  const std::vector<int32_t> tokens =
      read_eval_shard(shard_path, model.config().vocab_size, batch_size, seq_len);
  const int64_t available = DataLoader::full_windows(tokens.size(), batch_size, seq_len);
  const int64_t n = std::min(batches, available);
  Pipeline pipeline(model);
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Batch b = DataLoader::window(tokens, i, batch_size, seq_len);
    total += pipeline.forward({b.inputs.data(), b.targets.data()}, batch_size, seq_len);
  }
  return total / static_cast<double>(n);
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

TrainResult train(const TrainOptions& o) {
  check_options(o);

  ProcessGrid grid(o.grid);
  const bool root = grid.world_rank() == 0;
  const std::string resume_dir = o.resume.empty() ? "" : resolve_checkpoint(o.resume);
  const std::string init_dir = o.init_from.empty() ? "" : resolve_checkpoint(o.init_from);
  if (!resume_dir.empty()) verify_checkpoint(resume_dir);
  if (!init_dir.empty()) verify_checkpoint(init_dir);
  const ModelConfig config = resolve_config(o, resume_dir.empty() ? init_dir : resume_dir);
  const DataFiles data = open_data(o.data_dir, config, o);
  check_memory_fits(estimate_rank_memory(o, config, o.layout.value_or(default_layout(config)),
                                         read_shard_header(data.train).num_tokens),
                    ranks_on_this_machine(), available_memory_bytes(), o);

  LoaderConfig loader_config;
  loader_config.batch_size = o.batch_size;
  loader_config.seq_len = o.seq_len;
  loader_config.dp_rank = grid.dp_rank();
  loader_config.dp_size = grid.shape().dp;
  loader_config.shuffle = o.shuffle;
  loader_config.seed = o.seed;
  std::vector<int32_t> train_tokens = read_shard(data.train);
  check_tokens_below(train_tokens, config.vocab_size, data.train);
  DataLoader loader(std::move(train_tokens), loader_config, data.train);

  if (o.zero != 0 && o.zero != 1) throw error("--zero ", o.zero, ": only stage 1 is implemented");
  // A pipeline stage keeps the activations of the micro-batches in flight in 1F1B.
  Model model(config, o.precision, o.layout, &grid.tp(), o.block, &grid.pp(),
              Pipeline::micro_slots(grid.shape().pp, grid.pp_rank(), o.grad_accum));
  Pipeline pipeline(model);
  // ZeRO-1: this DP rank owns a range of the flat buffer and the optimizer state for it only.
  ZeroStage1 zero(model.params().total_elements(), grid.dp());
  const bool use_zero = o.zero == 1;
  AdamW optimizer(model.params(), o.optimizer, use_zero ? zero.begin() : 0,
                  use_zero ? zero.end() : -1);
  GradReducer reducer(model.params(), config.n_layers, model.grads(), grid.dp(), o.bucket_mb << 20);
  // Moments as every element of this rank's shards (for checkpoints under ZeRO).
  FlatBuffer local_m(use_zero ? model.params().total_elements() : 0),
      local_v(use_zero ? model.params().total_elements() : 0);
  TrainingState state;
  if (!resume_dir.empty()) {
    load_checkpoint_weights(resume_dir, model);
    if (use_zero) {
      optimizer.set_steps_taken(
          load_training_state(resume_dir, model.params(), local_m, local_v, state));
      zero.take_range(local_m, optimizer.first_moment());
      zero.take_range(local_v, optimizer.second_moment());
    } else {
      load_training_state(resume_dir, optimizer, state);
    }
    loader.load_state(state.loader);
  } else if (!init_dir.empty()) {
    load_checkpoint_weights(init_dir, model);
  } else {
    model.init_weights(o.seed);
  }
  if (state.step >= o.steps)
    throw error("the checkpoint is already at step ", state.step, " of --steps ", o.steps);
  const LrSchedule schedule = resolve_schedule(o, resume_dir.empty() ? nullptr : &state, root);

  const fs::path run(o.out_dir);
  RunDirectoryLock run_lock;
  MetricsLog metrics;
  if (root) {
    run_lock = RunDirectoryLock(run);
    metrics = open_run_directory(run, config, resume_dir, state.step, o.overwrite);
  }

  const ModelFlops flops = model_flops(config, o.batch_size, o.seq_len);
  // Model FLOPs of the whole job's step (every DP replica), against every rank's GEMM peak.
  const double step_flops = flops.training() * o.grad_accum * grid.shape().dp;
  const double peak_gflops = measure_peak_gemm_gflops(o.precision) * grid.shape().world();
  const int64_t tokens_per_step = o.batch_size * o.seq_len * o.grad_accum * grid.shape().dp;
  const bool tty = root && o.progress && ::isatty(STDERR_FILENO);

  if (root)
    std::fprintf(stderr,
                 "boostlm train: %s %s, %.2fM parameters, %s, layout %s, tp %d x pp %d x dp %d, "
                 "%ld tokens/step, steps %ld..%ld\n",
                 to_string(config.arch).c_str(), o.config_path.c_str(),
                 model.full_params().parameter_count() / 1e6, to_string(o.precision).c_str(),
                 to_string(model.layout()).c_str(), grid.shape().tp, grid.shape().pp,
                 grid.shape().dp, tokens_per_step, state.step, o.steps);

  // Gathers full tensors over TP (every rank takes part); world rank 0 writes.
  FlatBuffer full_weights(model.full_params().total_elements()),
      full_m(model.full_params().total_elements()), full_v(model.full_params().total_elements());
  auto save = [&](const char* why) {
    char name[32];
    std::snprintf(name, sizeof name, "step_%06ld", state.step);
    const fs::path dir = run / "checkpoints" / name;
    model.gather_full(model.weights(), full_weights);
    if (use_zero) {  // the DP ranks' ranges first, then the TP shards
      zero.all_gather_range(optimizer.first_moment(), local_m);
      zero.all_gather_range(optimizer.second_moment(), local_v);
      model.gather_full(local_m, full_m);
      model.gather_full(local_v, full_v);
    } else {
      model.gather_full(optimizer.first_moment(), full_m);
      model.gather_full(optimizer.second_moment(), full_v);
    }
    if (root) {
      state.loader = loader.state();
      state.extra = {{"seed", o.seed},
                     {"arch", to_string(config.arch)},
                     {"layout", to_string(model.layout())},
                     {"tp", grid.shape().tp},
                     {"pp", grid.shape().pp},
                     {"dp", grid.shape().dp},
                     {"zero", o.zero},
                     {"schedule_steps", schedule.total_steps}};
      CheckpointWrite w;
      w.config = &config;
      w.table = &model.full_params();
      w.weights = &full_weights;
      w.exp_avg = &full_m;
      w.exp_avg_sq = &full_v;
      w.optimizer_step = optimizer.steps_taken();
      w.state = &state;
      w.tokenizer_path = data.tokenizer;
      try {
        save_checkpoint(dir.string(), w);
        write_file_atomically((run / "checkpoints" / "latest").string(), std::string(name) + "\n");
      } catch (const std::exception& e) {
        const std::string last = latest_checkpoint_name(run / "checkpoints");
        throw error("cannot save checkpoint ", dir.string(), ": ", e.what(), ". ",
                    last.empty() ? std::string("No earlier checkpoint of this run exists.")
                                 : "The last good checkpoint, " + last + ", is intact.");
      }
      prune_checkpoints(run / "checkpoints", o.keep_checkpoints, name);
      if (tty) std::fprintf(stderr, "\n");
      std::fprintf(stderr, "checkpoint (%s): %s\n", why, dir.c_str());
    }
    grid.world().barrier();
    return dir.string();
  };
  // The validation shard was checked up front; should evaluation fail anyway (the file changed
  // under the run), the trained weights are saved before the run ends.
  auto validate_now = [&]() -> float {
    if (data.val.empty()) return -1.0f;
    try {
      return static_cast<float>(evaluate(model, data.val, o.batch_size, o.seq_len, o.eval_batches));
    } catch (const Error& e) {
      const std::string saved = save("validation failed");
      throw error(e.what(), " (the trained weights are saved in ", saved, ")");
    }
  };

  g_signal.store(0);
  auto old_int = std::signal(SIGINT, on_signal);
  auto old_term = std::signal(SIGTERM, on_signal);

  TrainResult result;
  const double start = now_s();
  const int64_t first_step = state.step;
  while (state.step < o.steps) {
    set_watchdog_step(state.step + 1);  // for the watchdog's message, numbered as in the metrics
    const double t0 = now_s();
    const CommCounts tp_before = grid.tp().counts(), dp_before = grid.dp().counts(),
                     pp_before = grid.pp().counts();
    model.grads().zero();
    std::vector<Batch> batches;
    std::vector<MicroBatch> micro;
    for (int64_t i = 0; i < o.grad_accum; ++i) batches.push_back(loader.next());
    for (const Batch& b : batches) micro.push_back({b.inputs.data(), b.targets.data()});
    // The micro-batches in 1F1B order over the stages (one stage: one after the other). The
    // gradient all-reduce overlaps the backward of the last micro-batch only (ZeRO
    // reduce-scatters after backward instead).
    double loss = pipeline.forward_backward(micro, o.batch_size, o.seq_len,
                                            1.0f / static_cast<float>(o.grad_accum),
                                            use_zero ? nullptr : &reducer);
    const CommCounts pp_step = grid.pp().counts() - pp_before;
    const PipelineTimes stage_times = pipeline.gather_times();  // for the metrics
    if (use_zero)
      zero.reduce_scatter(model.grads());
    else
      reducer.finish();
    // Control data over the world: the mean loss over DP replicas, and whether any rank was
    // signalled (so every rank saves and stops at the same step).
    double control[2] = {loss / static_cast<double>(o.grad_accum), g_signal.load() ? 1.0 : 0.0};
    grid.world().all_reduce(control, 2);
    loss = control[0] / grid.shape().world();
    const bool signalled = control[1] > 0;
    const float lr = schedule.at(state.step);
    const float grad_norm = static_cast<float>(
        std::sqrt(use_zero ? model.grad_sum_squares(zero.begin(), zero.end(), &grid.dp())
                           : model.grad_sum_squares()));
    if (std::isfinite(loss) && std::isfinite(grad_norm)) {
      optimizer.step(model.weights(), model.grads(), lr, grad_norm);
      if (use_zero) zero.all_gather(model.weights());
    } else {
      if (root) {
        if (tty) std::fprintf(stderr, "\n");
        std::fprintf(
            stderr,
            "boostlm train: step %ld: %s is %f; stopping without saving. The last good "
            "checkpoint is %s\n",
            state.step, std::isfinite(loss) ? "the gradient norm" : "the loss",
            std::isfinite(loss) ? grad_norm : loss,
            result.checkpoint.empty() ? "(none written in this run)" : result.checkpoint.c_str());
      }
      result.diverged = true;
      break;
    }
    const double step_s = now_s() - t0;
    state.step += 1;
    state.tokens_seen += tokens_per_step;
    result.last_loss = static_cast<float>(loss);

    const bool eval_now =
        (o.eval_interval > 0 && state.step % o.eval_interval == 0) || state.step == o.steps;
    if (eval_now) result.val_loss = validate_now();
    if (root) {
      nlohmann::json line = {
          {"step", state.step},
          {"loss", loss},
          {"lr", lr},
          {"grad_norm", grad_norm},
          {"step_ms", step_s * 1e3},
          {"tokens_per_s", tokens_per_step / step_s},
          {"mfu", step_flops / step_s / (peak_gflops * 1e9)},
          {"tokens_seen", state.tokens_seen},
          {"peak_rss_mb", peak_rss_mb()},
          {"activation_mb", model.activation_bytes() / 1e6},
          {"optimizer_state_mb", 2.0 * (optimizer.end() - optimizer.begin()) * 4 / 1e6},
          {"comm",
           {{"tp", comm_json(grid.tp().counts() - tp_before)},
            {"dp", comm_json(grid.dp().counts() - dp_before)},
            {"pp", comm_json(pp_step)}}}};
      if (grid.shape().pp > 1) {
        nlohmann::json stages = nlohmann::json::array();
        for (int s = 0; s < grid.shape().pp; ++s)
          stages.push_back({{"compute_ms", stage_times.compute_s[s] * 1e3},
                            {"bubble_ms", stage_times.bubble_s(s) * 1e3}});
        line["pipeline"] = {{"stages", stages},
                            {"micro_batches", o.grad_accum},
                            {"time_ms", stage_times.span_s * 1e3},
                            {"bubble_fraction", stage_times.bubble_fraction()},
                            {"bubble_fraction_1f1b",
                             PipelineTimes::one_f_one_b_fraction(grid.shape().pp, o.grad_accum)}};
      }
      if (eval_now && result.val_loss >= 0) line["val_loss"] = result.val_loss;
      metrics.append(line);

      const double elapsed = now_s() - start;
      const double eta = elapsed / (state.step - first_step) * (o.steps - state.step);
      char progress[256];
      std::snprintf(progress, sizeof progress,
                    "step %ld/%ld | loss %.4f | lr %.2e | gnorm %.2f | %.0f tok/s | MFU %.1f%% | "
                    "ETA %s",
                    state.step, o.steps, loss, lr, grad_norm, tokens_per_step / step_s,
                    100.0 * step_flops / step_s / (peak_gflops * 1e9),
                    format_duration(eta).c_str());
      if (tty)
        std::fprintf(stderr, "\r%-110s", progress);
      else if (state.step % std::max<int64_t>(1, o.log_interval) == 0 || state.step == o.steps)
        std::fprintf(stderr, "%s\n", progress);
      if (eval_now && result.val_loss >= 0)
        std::fprintf(stderr, "%sstep %ld: val loss %.4f\n", tty ? "\n" : "", state.step,
                     result.val_loss);
    }

    if (signalled) {
      result.checkpoint = save("interrupted");
      result.interrupted = true;
      break;
    }
    if (o.save_interval > 0 && state.step % o.save_interval == 0 && state.step < o.steps)
      result.checkpoint = save("interval");
  }
  if (!result.diverged && !result.interrupted) result.checkpoint = save("final");
  if (tty) std::fprintf(stderr, "\n");
  std::signal(SIGINT, old_int);
  std::signal(SIGTERM, old_term);
  result.steps_done = state.step;
  result.seconds = now_s() - start;
  return result;
}

}  // namespace boostlm
