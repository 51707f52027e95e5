// `boostlm bench layouts|ablations|gemm|step`: the benchmarks of src/bench as commands. The
// multi-rank ones run on as many ranks as they are launched on, that number being the TP size:
//
//   boostlm launch -n 2 -- bench layouts --shape 60m --json layouts.json
//   boostlm launch -n 2 -- bench ablations --shape 60m
//   boostlm launch -n 2 -- bench gemm --shape 60m        (or one process: bench gemm --tp 2)
//   boostlm bench step --shape 60m --arch cola --precision fp32 bf16
//   boostlm launch -n 2 -- bench pipeline --shape 60m --vocab-size 512   (PP = the ranks / --tp)
//
// Every one prints a table (rank 0) and, with --json FILE, writes the same as JSON.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/device_step.h"
#include "bench/gemm_bench.h"
#include "bench/layout_bench.h"
#include "bench/metrics_bench.h"
#include "bench/pipeline_bench.h"
#include "bench/step_bench.h"
#include "bench/tokenizer_bench.h"
#include "cli/checks.h"
#include "cli/commands.h"
#include "comm/grid.h"
#include "comm/mpi_runtime.h"
#include "core/device.h"
#include "core/error.h"

namespace boostlm::cli {
namespace {

void write_json(const std::string& path, const std::string& benchmark, nlohmann::json j) {
  if (path.empty() || mpi_world_rank() != 0) return;
  j["benchmark"] = benchmark;
  std::ofstream out(path);
  if (!out) throw error("cannot write ", path);
  out << j.dump(2) << "\n";
  if (!out) throw error("cannot write ", path);
}

// The grid of all the ranks this command runs on, as one TP group.
std::unique_ptr<ProcessGrid> tp_grid() {
  return mpi_world_size() > 1 ? std::make_unique<ProcessGrid>(GridShape{mpi_world_size(), 1, 1})
                              : std::make_unique<ProcessGrid>();
}

struct LayoutFlags {
  bench::LayoutBenchOptions options;
  std::string low_rank = "cola", precision = "fp32", json, link_rate;
  bool breakdown = false;
};

// The label of the link between the ranks, for the JSON: --link-rate, else what `boostlm launch`
// read from an emulated cluster's hostfile (BOOSTLM_LINK_RATE: a tc rate, or "none" when not
// shaped), else "local": one machine, shared memory.
std::string link_rate_label(const std::string& given) {
  if (!given.empty()) return given;
  const char* launched = std::getenv("BOOSTLM_LINK_RATE");
  return launched && *launched ? launched : "local";
}

// layouts and ablations: the same runner, different default configurations and tables.
void add_layout_command(CLI::App& bench, const std::string& name, const std::string& help,
                        bench::LayoutBenchOptions defaults, bool ablation_table) {
  auto* cmd = bench.add_subcommand(name, help);
  add_device_option(*cmd);
  auto f = std::make_shared<LayoutFlags>();
  f->options = defaults;
  auto& o = f->options;
  cmd->add_option("--shape", o.shape, "preset (60m, 130m, ..., tiny) or a low-rank config file")
      ->capture_default_str();
  cmd->add_option("--low-rank", f->low_rank, "model of naive-tp and btp")
      ->check(CLI::IsMember({"cola", "svd", "lax"}))
      ->capture_default_str();
  cmd->add_option("--precision", f->precision, "fp32 or bf16")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--batch-size,-b", o.batch, "sequences per step")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--seq-len,-t", o.seq_len, "tokens per sequence")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--steps", o.steps, "timed steps per configuration (median reported)")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "untimed steps after the first (which measures memory)")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--variants", o.variants, "variants to run, in this order")
      ->check(CLI::IsMember(bench::variant_names()))
      ->capture_default_str();
  cmd->add_option("--tp-overlap-chunks", o.overlap_chunks,
                  "chunks per micro-batch of the *-overlap variants (a divisor of -b is used)")
      ->check(at_least(2))
      ->capture_default_str();
  cmd->add_option("--residual-dtype", o.residual_dtype,
                  "bf16 training's residual stream between blocks: bf16 (default) or fp32 (the "
                  "ablation, as train's --residual-dtype)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_flag("--breakdown", f->breakdown, "also print ms per step in each kernel family");
  cmd->add_option("--json", f->json, "also write the results as JSON");
  cmd->add_option("--link-rate", f->link_rate,
                  "label of the link between the ranks, for the JSON (default: the emulated "
                  "cluster's rate, else \"local\")");
  add_comm_timeout(*cmd);
  cmd->callback([f, name, ablation_table] {
    f->options.low_rank = parse_arch(f->low_rank);
    f->options.precision = parse_dtype(f->precision);
    auto grid = tp_grid();
    const bench::LayoutBenchReport report = bench::run_layout_bench(grid->tp(), f->options);
    if (grid->world_rank() == 0) {
      if (ablation_table)
        bench::print_ablation_table(report);
      else
        bench::print_layout_table(report);
      if (f->breakdown) bench::print_phase_table(report);
    }
    nlohmann::json j = bench::to_json(report);
    j["link_rate"] = link_rate_label(f->link_rate);
    write_json(f->json, name, j);
  });
}

void add_gemm_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "gemm",
      "per-rank GEMM shapes of naive-tp and btp, fp32 and bf16, against this machine's peak");
  add_device_option(*cmd);
  auto o = std::make_shared<bench::GemmBenchOptions>();
  auto arch = std::make_shared<std::string>("cola");
  auto tp = std::make_shared<int>(0);
  auto json = std::make_shared<std::string>();
  cmd->add_option("--shape", o->shape, "preset (60m, 130m, ..., tiny) or a low-rank config file")
      ->capture_default_str();
  cmd->add_option("--arch", *arch, "low-rank architecture")
      ->check(CLI::IsMember({"cola", "svd"}))
      ->capture_default_str();
  computed_default(
      cmd->add_option("--tp", *tp, "TP size whose shapes to measure (default: the ranks, or 2)"))
      ->check(at_least(1));
  cmd->add_option("--tokens", o->tokens, "rows of the activations (micro-batch x sequence)")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--reps", o->reps, "fastest of this many calls per shape")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--json", *json, "also write the results as JSON");
  cmd->callback([o, arch, tp, json] {
    o->arch = parse_arch(*arch);
    o->tp = *tp ? *tp : (mpi_world_size() > 1 ? mpi_world_size() : 2);
    auto grid = tp_grid();
    const bench::GemmBenchReport report = bench::run_gemm_bench(grid->world(), *o);
    if (grid->world_rank() == 0) bench::print_gemm_table(report);
    write_json(*json, "gemm", bench::to_json(report));
  });
}

void add_step_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "step", "training steps in one process: each architecture and precision, MFU, GEMM share");
  add_device_option(*cmd);
  auto o = std::make_shared<bench::StepBenchOptions>();
  auto json = std::make_shared<std::string>();
  cmd->add_option("--shape", o->shape, "preset (configs/<shape>-<arch>.json)")
      ->capture_default_str();
  cmd->add_option("--arch", o->archs, "architectures")
      ->check(CLI::IsMember({"dense", "svd", "cola", "lax"}))
      ->capture_default_str();
  cmd->add_option("--precision", o->precisions, "precisions")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--batch-size,-b", o->batch, "sequences per step")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--seq-len,-t", o->seq_len, "tokens per sequence")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--steps", o->steps, "timed steps (median reported)")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "untimed steps first")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--residual-dtype", o->residual_dtype,
                  "bf16 training's residual stream between blocks: bf16 (default) or fp32 (the "
                  "ablation, as train's --residual-dtype)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_flag("--breakdown", o->breakdown, "print ms per step in each kernel family");
  cmd->add_option("--json", *json, "also write the results as JSON");
  // On the emulated CUDA device: one step counted kernel by kernel and priced on a GPU.
  auto device = std::make_shared<bench::DeviceStepOptions>();
  cmd->add_flag("--count-only", device->count_only,
                "emulated CUDA device: count the kernels without running them (any size)");
  cmd->add_option("--hardware", device->hardware,
                  "emulated CUDA device: the GPU the counted step is priced on (hardware/*.json)")
      ->capture_default_str();
  computed_default(cmd->add_option("--layers", device->layers,
                                   "emulated CUDA device: blocks of the model (default: the "
                                   "preset's)"))
      ->check(at_least(1));
  cmd->add_option("--top", device->top, "emulated CUDA device: kernels listed, slowest first")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->callback([o, json, device] {
    if (mpi_world_size() > 1)
      throw error("bench step runs in one process; for several ranks use bench layouts");
    if (current_device() == Device::cuda && bench::device_counts_kernels()) {
      device->shape = o->shape;
      device->archs = o->archs;
      device->precisions = o->precisions;
      device->batch = o->batch;
      device->seq_len = o->seq_len;
      device->residual_dtype = o->residual_dtype;
      const auto results = bench::run_device_step_bench(*device);
      write_json(*json, "step", bench::to_json(*device, results));
      return;
    }
    if (device->count_only || device->layers > 0)
      throw error(
          "bench step: --count-only and --layers need the emulated CUDA device "
          "(a -DBOOSTLM_CUDA=EMULATE build with --device cuda)");
    const auto results = bench::run_step_bench(*o);
    write_json(*json, "step", bench::to_json(*o, results));
  });
}

void add_pipeline_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "pipeline", "1F1B's bubble per micro-batch count against (p-1)/(m+p-1); PP = ranks / --tp");
  add_device_option(*cmd);
  auto o = std::make_shared<bench::PipelineBenchOptions>();
  auto arch = std::make_shared<std::string>("cola");
  auto precision = std::make_shared<std::string>("fp32");
  auto json = std::make_shared<std::string>();
  auto tp = std::make_shared<int>(1);
  cmd->add_option("--shape", o->shape, "preset (60m, 130m, ..., tiny) or a config file")
      ->capture_default_str();
  cmd->add_option("--arch", *arch, "architecture")
      ->check(CLI::IsMember({"dense", "svd", "cola"}))
      ->capture_default_str();
  cmd->add_option("--precision", *precision, "fp32 or bf16")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--tp", *tp, "tensor-parallel size inside each stage")
      ->check(at_least(1))
      ->capture_default_str();
  computed_default(cmd->add_option("--vocab-size", o->vocab_size,
                                   "vocabulary size (default: the preset's; a small one keeps the "
                                   "last stage's head from dominating)"))
      ->check(at_least(1));
  cmd->add_option("--batch-size,-b", o->batch, "sequences per micro-batch")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--seq-len,-t", o->seq_len, "tokens per sequence")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--micro-batches,-m", o->micro_batches, "micro-batch counts to measure")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--steps", o->steps, "timed steps per count (median reported)")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "untimed steps per count first")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--json", *json, "also write the results as JSON");
  add_comm_timeout(*cmd);
  cmd->callback([o, arch, precision, tp, json] {
    o->arch = parse_arch(*arch);
    o->precision = parse_dtype(*precision);
    const int world = mpi_world_size();
    if (world < 2 || world % *tp != 0 || world / *tp < 2)
      throw error("bench pipeline needs at least 2 stages: launch it on PP x --tp ranks (", world,
                  " rank(s) and --tp ", *tp, " given)");
    ProcessGrid grid(GridShape{*tp, world / *tp, 1});
    const bench::PipelineBenchReport report = bench::run_pipeline_bench(grid, *o);
    if (grid.world_rank() == 0) bench::print_pipeline_table(report);
    write_json(*json, "pipeline", bench::to_json(report));
  });
}

void add_tokenizer_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "tokenizer", "encoding MB/s of a tokenizer (.model or tokenizer.json) on a text's lines");
  auto o = std::make_shared<bench::TokenizerBenchOptions>();
  auto json = std::make_shared<std::string>();
  cmd->add_option("--tokenizer", o->tokenizer, "sentencepiece .model or tokenizer.json")
      ->required();
  cmd->add_option("--text", o->text, "text file, encoded line by line")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--repeats", o->repeats, "timed passes after a warm-up (median reported)")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "threads, each encoding its share of the lines")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--json", *json, "also write the result as JSON");
  cmd->callback([o, json] { write_json(*json, "tokenizer", bench::run_tokenizer_bench(*o)); });
}

void add_metrics_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "metrics", "what a step's metrics cost: metrics.jsonl alone and with the TensorBoard events");
  auto o = std::make_shared<bench::MetricsBenchOptions>();
  auto json = std::make_shared<std::string>();
  cmd->add_option("--dir", o->dir, "where the scratch run directories go (a run's disk)")
      ->check(CLI::ExistingDirectory)
      ->capture_default_str();
  cmd->add_option("--steps", o->steps, "appends per repeat")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--repeats", o->repeats, "repeats of each (median reported)")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--json", *json, "also write the result as JSON");
  cmd->callback([o, json] { write_json(*json, "metrics", bench::run_metrics_bench(*o)); });
}

}  // namespace

void add_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "bench", "benchmarks: layouts, ablations, gemm, step, pipeline, tokenizer, metrics");
  cmd->require_subcommand(1);
  bench::LayoutBenchOptions layouts;
  add_layout_command(*cmd, "layouts",
                     "dense-tp vs naive-tp vs btp (and btp's switches) at TP = the ranks launched",
                     layouts, false);
  bench::LayoutBenchOptions ablations;
  ablations.batch = 4;
  ablations.steps = 3;
  ablations.variants = bench::ablation_variant_names();
  add_layout_command(*cmd, "ablations",
                     "BOOST's ablations at TP = the ranks: online norm, grouping, checkpointing",
                     ablations, true);
  add_gemm_command(*cmd);
  add_step_command(*cmd);
  add_pipeline_command(*cmd);
  add_tokenizer_command(*cmd);
  add_metrics_command(*cmd);
}

}  // namespace boostlm::cli
