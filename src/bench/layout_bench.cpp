#include "bench/layout_bench.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "bench/timing.h"
#include "core/error.h"
#include "core/heap.h"
#include "core/profile.h"
#include "core/rng.h"
#include "engine/model.h"
#include "kernels/gemm_measure.h"
#include "model/flops.h"
#include "plan/models.h"
#include "train/optimizer.h"
#include "train/step.h"

namespace boostlm::bench {

namespace {

constexpr BlockOptions kBoost{true, true, Recompute::none};  // BOOST as the paper runs it

double phase_seconds(const char* name) {
  const auto& phases = Profile::global().seconds();
  const auto it = phases.find(name);
  return it == phases.end() ? 0.0 : it->second;
}

// A variant while it runs: its model and optimizer, and the time of each timed step.
struct Running {
  VariantResult result;
  std::unique_ptr<Model> model;
  std::unique_ptr<AdamW> optimizer;
  std::unique_ptr<Pipeline> pipeline;
  std::vector<double> step_s, comm_s, hidden_s, blocks_s, mfu_now;
};

std::string mb(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", bytes / 1e6);
  return text;
}

}  // namespace

namespace {

// Every registered layout with BOOST's default switches, then the ablations of the paper's
// comparison (the BOOST switches one at a time, on btp and naive-tp).
std::vector<Variant> make_variants() {
  std::vector<Variant> variants;
  for (const LayoutTraits& t : layout_registry())
    variants.push_back({t.name, t.kind, kBoost, t.summary});
  const std::vector<Variant> ablations = {
      {"btp-sync-rmsnorm",
       LayoutKind::btp,
       {false, true, Recompute::none},
       "btp with a separate all-reduce for the norm"},
      {"btp-ungrouped",
       LayoutKind::btp,
       {true, false, Recompute::none},
       "btp without linear-layer grouping"},
      {"btp-recompute-lowrank",
       LayoutKind::btp,
       {true, true, Recompute::lowrank},
       "btp, low-rank activation checkpointing"},
      {"btp-recompute-block",
       LayoutKind::btp,
       {true, true, Recompute::block},
       "btp, whole-block recomputation"},
      {"naive-tp-ungrouped",
       LayoutKind::naive_tp,
       {true, false, Recompute::none},
       "naive-tp without linear-layer grouping"},
      {"naive-tp-recompute-block",
       LayoutKind::naive_tp,
       {true, true, Recompute::block},
       "naive-tp, whole-block recomputation"},
  };
  variants.insert(variants.end(), ablations.begin(), ablations.end());
  // Beyond the paper: every layout with --tp-overlap, and every layout's compute floor.
  for (const LayoutTraits& t : layout_registry()) {
    BlockOptions overlap = kBoost;
    overlap.overlap_chunks = 2;  // LayoutBenchOptions::overlap_chunks at run time
    variants.push_back({std::string(t.name) + "-overlap", t.kind, overlap,
                        std::string(t.name) + ", TP collectives hidden behind another chunk"});
  }
  for (const LayoutTraits& t : layout_registry())
    variants.push_back({std::string(t.name) + "-compute-only", t.kind, kBoost,
                        std::string(t.name) + " with its TP all-reduces skipped (the floor)",
                        true});
  return variants;
}

}  // namespace

const std::vector<Variant>& all_variants() {
  static const std::vector<Variant> variants = make_variants();
  return variants;
}

std::vector<std::string> variant_names() {
  std::vector<std::string> names;
  for (const auto& v : all_variants()) names.push_back(v.name);
  return names;
}

const Variant& find_variant(const std::string& name) {
  for (const auto& v : all_variants())
    if (v.name == name) return v;
  std::string choices;
  for (const auto& n : variant_names()) choices += (choices.empty() ? "" : ", ") + n;
  throw error("no benchmark configuration named ", name, " (choose from ", choices, ")");
}

std::vector<std::string> layout_variant_names() {
  std::vector<std::string> names = layout_names();
  for (const char* ablation :
       {"btp-sync-rmsnorm", "btp-ungrouped", "btp-recompute-lowrank", "btp-recompute-block"})
    names.push_back(ablation);
  return names;
}

std::vector<std::string> ablation_variant_names() {
  return {"btp",
          "btp-sync-rmsnorm",
          "btp-ungrouped",
          "btp-recompute-lowrank",
          "btp-recompute-block",
          "naive-tp",
          "naive-tp-ungrouped",
          "naive-tp-recompute-block"};
}

const VariantResult* LayoutBenchReport::find(const std::string& name) const {
  for (const auto& r : results)
    if (r.variant.name == name) return &r;
  return nullptr;
}

double LayoutBenchReport::checkpoint_mb_per_ms(const VariantResult& r) const {
  if (r.variant.options.recompute == Recompute::none) return 0;
  const VariantResult* base = find(to_string(r.variant.layout));  // "btp", "naive-tp"
  if (!base) return 0;
  const double saved_mb = static_cast<double>(base->kept_bytes_per_block - r.kept_bytes_per_block) *
                          r.config.n_layers / 1e6;
  const double extra_ms = r.step_ms - base->step_ms;
  return extra_ms > 0 ? saved_mb / extra_ms : 0;
}

LayoutBenchReport run_layout_bench(Communicator& tp, const LayoutBenchOptions& o) {
  if (o.variants.empty()) throw error("bench: no configurations to run");
  LayoutBenchReport report;
  report.options = o;
  report.tp = tp.size();
  const ModelConfig low_rank = plan::find_model(o.shape, o.low_rank);
  if (!low_rank.low_rank())
    throw error("bench: ", o.shape, " is a dense model; naive-tp and btp need a low-rank one");
  const ModelConfig dense = plan::dense_counterpart(o.shape, low_rank);

  tp.barrier();
  report.peak_gflops = measure_peak_gemm_gflops(o.precision);
  Rng rng(7);
  std::vector<int32_t> tokens(o.batch * o.seq_len), targets(o.batch * o.seq_len);
  for (auto& x : tokens) x = static_cast<int32_t>(rng.below(low_rank.vocab_size));
  for (auto& x : targets) x = static_cast<int32_t>(rng.below(low_rank.vocab_size));
  const MicroBatch batch{tokens.data(), targets.data()};

  // Each variant is built and runs its first step before the next is built, so the heap's
  // high-water mark over that step counts its own memory only.
  std::vector<Running> runs;
  for (const auto& name : o.variants) {
    Running run;
    VariantResult& r = run.result;
    r.variant = find_variant(name);
    if (r.variant.options.overlap_chunks > 1) r.variant.options.overlap_chunks = o.overlap_chunks;
    r.config = layout_traits(r.variant.layout).low_rank ? low_rank : dense;
    r.model_flops = model_flops(r.config, o.batch, o.seq_len).training();
    if (!o.residual_dtype.empty()) r.variant.options.residual = parse_dtype(o.residual_dtype);
    check_options(r.variant.layout, r.variant.options);
    tp.barrier();
    const int64_t heap_before = heap_live_bytes();
    heap_reset_peak();
    run.model =
        std::make_unique<Model>(r.config, o.precision, r.variant.layout, &tp, r.variant.options);
    run.model->init_weights(1);
    run.optimizer = std::make_unique<AdamW>(run.model->params(), OptimizerConfig{});
    run.pipeline = std::make_unique<Pipeline>(*run.model);
    tp.set_compute_only(r.variant.compute_only);
    training_step(*run.pipeline, *run.optimizer, batch, o.batch, o.seq_len, kBenchLr);
    tp.set_compute_only(false);
    auto peak = static_cast<float>(heap_peak_bytes() - heap_before);
    tp.all_reduce_max_host(&peak, 1);
    r.peak_bytes = static_cast<int64_t>(peak);
    r.activation_bytes = run.model->activation_bytes();
    r.kept_bytes_per_block = run.model->kept_bytes_per_block();
    runs.push_back(std::move(run));
  }

  for (int rep = 0; rep < o.warmup + o.steps; ++rep) {
    for (auto& run : runs) {
      tp.barrier();
      // The ranks' GEMM rate just before the step, all probing at once as they then compute (a
      // shared virtual machine's speed drifts by up to 2x over tens of seconds): MFU against it
      // is the noise-normalised figure, as in bench step.
      float probe = 0;
      if (rep >= o.warmup) {
        probe = static_cast<float>(measure_gemm_gflops(1024, 1024, 1024, o.precision, 2));
        tp.all_reduce_host(&probe, 1);  // the group's rate: the sum over its ranks
        tp.barrier();
      }
      Profile::global().clear();
      const CommCounts before = tp.counts();
      tp.set_compute_only(run.result.variant.compute_only);
      const double t0 = now_s();
      run.result.loss =
          training_step(*run.pipeline, *run.optimizer, batch, o.batch, o.seq_len, kBenchLr);
      tp.set_compute_only(false);
      tp.barrier();  // the step ends when the slowest rank is done
      const double dt = now_s() - t0;
      if (rep < o.warmup) continue;
      run.step_s.push_back(dt);
      run.mfu_now.push_back(run.result.model_flops / dt / (probe * 1e9));
      run.comm_s.push_back(phase_seconds("comm"));
      run.hidden_s.push_back(phase_seconds("comm_hidden"));
      run.blocks_s.push_back(phase_seconds("block_forward") + phase_seconds("block_backward"));
      run.result.tp_comm = tp.counts() - before;
      for (const auto& [phase, seconds] : Profile::global().seconds())
        run.result.phase_ms[phase] += seconds * 1e3 / o.steps;
    }
  }

  for (auto& run : runs) {
    VariantResult& r = run.result;
    const double step = median(run.step_s);
    r.step_ms = step * 1e3;
    r.comm_ms = median(run.comm_s) * 1e3;
    r.comm_hidden_ms = median(run.hidden_s) * 1e3;
    r.blocks_ms = median(run.blocks_s) * 1e3;
    r.tokens_per_s = o.batch * o.seq_len / step;
    // Model FLOPs of the step against the GEMM peak of all the ranks that run it.
    r.mfu = r.model_flops / step / (report.peak_gflops * report.tp * 1e9);
    r.mfu_now = median(run.mfu_now);
    report.results.push_back(r);
  }
  return report;
}

nlohmann::json to_json(const LayoutBenchReport& report) {
  const LayoutBenchOptions& o = report.options;
  nlohmann::json out = {{"shape", o.shape},
                        {"low_rank", to_string(o.low_rank)},
                        {"precision", to_string(o.precision)},
                        {"batch", o.batch},
                        {"seq_len", o.seq_len},
                        {"tp", report.tp},
                        {"steps", o.steps},
                        {"warmup", o.warmup},
                        {"residual_dtype", o.residual_dtype.empty() ? "default" : o.residual_dtype},
                        {"peak_gflops_per_rank", report.peak_gflops},
                        {"results", nlohmann::json::array()}};
  for (const auto& r : report.results) {
    nlohmann::json kinds = nlohmann::json::object();
    for (int k = 0; k < kCollectiveKinds; ++k)
      if (r.tp_comm.by_kind[k].calls)
        kinds[to_string(static_cast<Collective>(k))] = {{"calls", r.tp_comm.by_kind[k].calls},
                                                        {"bytes", r.tp_comm.by_kind[k].bytes}};
    const BlockOptions& b = r.variant.options;
    out["results"].push_back({{"variant", r.variant.name},
                              {"layout", to_string(r.variant.layout)},
                              {"arch", to_string(r.config.arch)},
                              {"rmsnorm", b.online_norm ? "online" : "sync"},
                              {"grouping", b.grouping ? "on" : "off"},
                              {"recompute", to_string(b.recompute)},
                              {"overlap_chunks", b.overlap_chunks},
                              {"compute_only", r.variant.compute_only},
                              {"comm_hidden_ms", r.comm_hidden_ms},
                              {"step_ms", r.step_ms},
                              {"tokens_per_s", r.tokens_per_s},
                              {"mfu", r.mfu},
                              {"mfu_now", r.mfu_now},
                              {"model_gflop_per_step", r.model_flops / 1e9},
                              {"comm_ms", r.comm_ms},
                              {"compute_ms", r.compute_ms()},
                              {"block_us", r.blocks_ms * 1e3 / r.config.n_layers},
                              {"tp_comm", kinds},
                              {"tp_bytes", r.tp_comm.total_bytes()},
                              {"tp_calls", r.tp_comm.total_calls()},
                              {"peak_mb", r.peak_bytes / 1e6},
                              {"activation_mb", r.activation_bytes / 1e6},
                              {"kept_mb_per_block", r.kept_bytes_per_block / 1e6},
                              {"checkpoint_mb_per_ms", report.checkpoint_mb_per_ms(r)},
                              {"phase_ms", r.phase_ms},
                              {"loss", r.loss}});
  }
  return out;
}

namespace {

void print_heading(const LayoutBenchReport& report) {
  const LayoutBenchOptions& o = report.options;
  std::printf(
      "%s (%s), %s%s%s, batch %ld x seq %ld, TP %d, median of %d steps; GEMM peak %.0f GFLOP/s "
      "per rank\n\n",
      o.shape.c_str(), to_string(o.low_rank).c_str(), to_string(o.precision).c_str(),
      o.residual_dtype.empty() ? "" : ", residual stream ", o.residual_dtype.c_str(), o.batch,
      o.seq_len, report.tp, o.steps, report.peak_gflops);
}

}  // namespace

void print_layout_table(const LayoutBenchReport& report) {
  print_heading(report);
  std::printf("%-22s %-5s %8s %8s %6s %7s %8s %8s %8s %6s %8s %6s %8s %8s\n", "variant", "model",
              "step_ms", "tokens/s", "MFU", "MFU-now", "comm_ms", "hidden", "comp_ms", "comm%",
              "TP_MB", "calls", "peak_MB", "act_MB");
  for (const auto& r : report.results) {
    std::printf(
        "%-22s %-5s %8.1f %8.0f %5.1f%% %6.1f%% %8.1f %8.1f %8.1f %5.1f%% %8s %6ld %8s %8s\n",
        r.variant.name.c_str(), to_string(r.config.arch).c_str(), r.step_ms, r.tokens_per_s,
        100 * r.mfu, 100 * r.mfu_now, r.comm_ms, r.comm_hidden_ms, r.compute_ms(),
        100 * r.comm_ms / r.step_ms, mb(r.tp_comm.total_bytes()).c_str(), r.tp_comm.total_calls(),
        mb(r.peak_bytes).c_str(), mb(r.activation_bytes).c_str());
  }
  std::printf(
      "MFU: against the GEMM peak measured at the start; MFU-now: against a 1024^3 GEMM probed "
      "by every rank\njust before each step (the noise-normalised figure on a machine whose "
      "speed drifts).\ncomm_ms: waiting in TP collectives; hidden: in flight while another chunk "
      "computed (*-overlap);\ncomp_ms: step_ms - comm_ms; *-compute-only: the TP all-reduces "
      "skipped.\n");

  // Per collective kind: only the kinds some configuration used.
  std::vector<int> kinds;
  for (int k = 0; k < kCollectiveKinds; ++k)
    for (const auto& r : report.results)
      if (r.tp_comm.by_kind[k].calls) {
        kinds.push_back(k);
        break;
      }
  if (!kinds.empty()) {
    std::printf("\nTP collectives per step and rank (calls / MB):\n%-22s", "variant");
    for (int k : kinds) std::printf(" %20s", to_string(static_cast<Collective>(k)));
    std::printf("\n");
    for (const auto& r : report.results) {
      std::printf("%-22s", r.variant.name.c_str());
      for (int k : kinds) {
        const auto& c = r.tp_comm.by_kind[k];
        std::printf(" %9ld / %8s", c.calls, mb(c.bytes).c_str());
      }
      std::printf("\n");
    }
  }

  if (const VariantResult* btp = report.find("btp")) {
    std::printf("\nbtp speed-up per step:");
    for (const auto& r : report.results)
      if (&r != btp)
        std::printf("  over %s %.2fx", r.variant.name.c_str(), r.step_ms / btp->step_ms);
    std::printf("\n");
  }
}

void print_ablation_table(const LayoutBenchReport& report) {
  print_heading(report);
  std::printf("%-26s %9s %10s %12s %9s %14s\n", "variant", "step_ms", "block_us", "kept_MB/blk",
              "peak_MB", "ckpt MB/ms");
  for (const auto& r : report.results) {
    const double efficiency = report.checkpoint_mb_per_ms(r);
    char ckpt[32] = "-";
    if (r.variant.options.recompute != Recompute::none)
      std::snprintf(ckpt, sizeof ckpt, efficiency > 0 ? "%.2f" : "n/a (no slower)", efficiency);
    std::printf("%-26s %9.1f %10.0f %12.2f %9s %14s\n", r.variant.name.c_str(), r.step_ms,
                r.blocks_ms * 1e3 / r.config.n_layers, r.kept_bytes_per_block / 1e6,
                mb(r.peak_bytes).c_str(), ckpt);
  }
  std::printf(
      "\nblock_us: forward + backward of one transformer block; kept: activations kept from a "
      "block's\nforward to its backward; ckpt: memory saved over the model per ms of extra step "
      "time.\n");
}

void print_phase_table(const LayoutBenchReport& report) {
  std::vector<std::string> phases;
  for (const auto& r : report.results)
    for (const auto& [phase, ms] : r.phase_ms)
      if (std::find(phases.begin(), phases.end(), phase) == phases.end()) phases.push_back(phase);
  std::printf("\nms per step in each phase (rank 0; block_* contain the kernel phases):\n%-22s",
              "variant");
  for (const auto& phase : phases) std::printf(" %14s", phase.c_str());
  std::printf("\n");
  for (const auto& r : report.results) {
    std::printf("%-22s", r.variant.name.c_str());
    for (const auto& phase : phases) {
      const auto it = r.phase_ms.find(phase);
      std::printf(" %14.1f", it == r.phase_ms.end() ? 0.0 : it->second);
    }
    std::printf("\n");
  }
}

}  // namespace boostlm::bench
