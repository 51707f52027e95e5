#include "bench/step_bench.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>

#include "bench/timing.h"
#include "core/device.h"
#include "core/heap.h"
#include "core/profile.h"
#include "core/rng.h"
#include "engine/model.h"
#include "kernels/gemm.h"
#include "kernels/gemm_counters.h"
#include "kernels/gemm_measure.h"
#include "model/flops.h"
#include "plan/models.h"
#include "train/optimizer.h"
#include "train/step.h"

namespace boostlm::bench {

namespace {

// Replays recorded GEMM shapes alone; returns the median total seconds over reps.
double replay_gemms(const std::vector<GemmShape>& shapes, int reps) {
  int64_t max_a = 0, max_b = 0, max_c = 0;
  for (const auto& s : shapes) {
    max_a = std::max(max_a, s.M * s.K);
    max_b = std::max(max_b, s.K * s.N);
    max_c = std::max(max_c, s.M * s.N);
  }
  std::vector<float> a(max_a, 0.01f), b(max_b, 0.01f), c(max_c, 0.0f);
  std::vector<double> totals;
  for (int r = 0; r < reps + 1; ++r) {
    const double t0 = now_s();
    for (const auto& s : shapes) {
      const int64_t lda = s.trans_a == Trans::N ? s.K : s.M;
      const int64_t ldb = s.trans_b == Trans::N ? s.N : s.K;
      gemm(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.0f, a.data(), lda, b.data(), ldb, s.beta,
           c.data(), s.N, s.compute);
    }
    if (r > 0) totals.push_back(now_s() - t0);
  }
  return median(totals);
}

// Milliseconds per step in each profiled kernel family, and "other" for the rest of the step.
// The whole-block phases contain the kernel phases, so they are left out.
std::map<std::string, double> phase_breakdown(double step_total_s, int steps) {
  std::map<std::string, double> ms;
  double accounted = 0;
  for (const auto& [phase, seconds] : Profile::global().seconds()) {
    if (phase == "block_forward" || phase == "block_backward") continue;
    ms[phase] = seconds / steps * 1e3;
    accounted += seconds;
  }
  ms["other"] = (step_total_s - accounted) / steps * 1e3;
  return ms;
}

std::string breakdown_text(const std::map<std::string, double>& ms) {
  std::string text;
  char item[64];
  for (const auto& [phase, value] : ms) {
    std::snprintf(item, sizeof item, " %s %.1f", phase.c_str(), value);
    text += item;
  }
  return text;
}

// The GEMM shapes of one recorded step, the most time first: calls, ms, GFLOP/s and % of peak.
std::string shape_table(double peak) {
  auto times = gemm_recorded_shape_times();
  std::sort(times.begin(), times.end(),
            [](const GemmShapeTime& a, const GemmShapeTime& b) { return a.seconds > b.seconds; });
  std::string text;
  char line[160];
  for (const GemmShapeTime& t : times) {
    const GemmShape& s = t.shape;
    const double gflops = t.flops / t.seconds / 1e9;
    std::snprintf(line, sizeof line,
                  "       %c%c M %6ld N %6ld K %6ld beta %g: %4ld calls %8.2f ms %7.1f GFLOP/s "
                  "%5.1f%%\n",
                  s.trans_a == Trans::N ? 'N' : 'T', s.trans_b == Trans::N ? 'N' : 'T', s.M, s.N,
                  s.K, s.beta, t.calls, t.seconds * 1e3, gflops, 100 * gflops / peak);
    text += line;
  }
  return text;
}

StepResult run_one(const StepBenchOptions& o, const ModelConfig& config, const std::string& arch,
                   const std::string& precision, double peak, Rng& rng) {
  const int64_t B = o.batch, T = o.seq_len;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.below(config.vocab_size));
  for (auto& t : targets) t = static_cast<int32_t>(rng.below(config.vocab_size));
  const DType dtype = parse_dtype(precision);
  // Everything the step holds: weights, gradients, moments, activations and scratch.
  const int64_t heap_before = heap_live_bytes();
  heap_reset_peak();
  BlockOptions options;
  if (!o.residual_dtype.empty()) options.residual = parse_dtype(o.residual_dtype);
  Model model(config, dtype, {}, nullptr, options);
  model.init_weights(1);
  AdamW optimizer(model.params(), OptimizerConfig{});
  Pipeline pipeline(model);
  const MicroBatch batch{tokens.data(), targets.data()};
  std::vector<double> step_s, gemm_s, probe_mfu;
  const ModelFlops flops = model_flops(config, B, T);
  float loss = 0;
  int64_t peak_bytes = 0;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    // This machine's GEMM rate just before the step (a shared virtual machine's speed drifts by up
    // to 2x over tens of seconds): MFU against it is the noise-normalised figure.
    const double probe = s >= o.warmup ? measure_gemm_gflops(1024, 1024, 1024, dtype, 2) : 0;
    if (s == o.warmup) {
      gemm_record_shapes(true);
      Profile::global().clear();
    }
    const GemmCounters before = gemm_counters();
    heap_reset_peak();  // the probe's matrices are not the step's
    const double t0 = now_s();
    loss = training_step(pipeline, optimizer, batch, B, T, kBenchLr);
    const double dt = now_s() - t0;
    peak_bytes = std::max(peak_bytes, heap_peak_bytes() - heap_before);
    if (s == o.warmup) gemm_record_shapes(false);
    if (s >= o.warmup) {
      probe_mfu.push_back(flops.training() / dt / (probe * 1e9));
      step_s.push_back(dt);
      gemm_s.push_back(gemm_counters().seconds - before.seconds);
    }
  }
  const std::map<std::string, double> breakdown =
      phase_breakdown(std::accumulate(step_s.begin(), step_s.end(), 0.0), o.steps);
  const std::string shapes = shape_table(peak);
  // The replay runs the interface's GEMMs on host arrays: the CPU's only (on a GPU the events'
  // GEMM time is the share, and no replay is made).
  const double isolated =
      current_device() == Device::cpu ? replay_gemms(gemm_recorded_shapes(), 3) : 0.0;
  gemm_clear_recorded_shapes();
  const double step = median(step_s);
  const double rate = flops.training() / step;
  const double gemm_flops = 3 * (flops.projections + flops.head);
  StepResult r;
  r.arch = arch;
  r.precision = precision;
  r.params_m = model.params().parameter_count() / 1e6;
  r.step_ms = step * 1e3;
  r.min_step_ms = *std::min_element(step_s.begin(), step_s.end()) * 1e3;
  r.tokens_per_s = B * T / step;
  r.gemm_share = median(gemm_s) / step;
  r.mfu = rate / (peak * 1e9);
  r.mfu_probe = median(probe_mfu);
  r.gemm_efficiency = isolated > 0 ? rate / (gemm_flops / isolated) : 0.0;
  r.activation_mb = model.activation_bytes() / 1e6;
  r.peak_mb = peak_bytes / 1e6;
  r.peak_gflops = peak;
  r.loss = loss;
  r.breakdown = breakdown;
  r.gemm_shapes = shapes;
  return r;
}

}  // namespace

std::vector<StepResult> run_step_bench(const StepBenchOptions& o) {
  // The peak is measured again before each configuration and the best so far is kept: a peak
  // measured in a slow second would overstate every MFU after it.
  double peak_fp32 = measure_peak_gemm_gflops(DType::f32);
  double peak_bf16 = measure_peak_gemm_gflops(DType::bf16);
  std::printf(
      "peak GEMM (best n^3 so far, this machine, this run; measured again before each row): "
      "fp32 %.1f GFLOP/s, bf16 %.1f GFLOP/s\n",
      peak_fp32, peak_bf16);
  std::printf(
      "shape %s, batch %ld x seq %ld = %ld tokens/step, median of %d steps after %d "
      "warm-up%s%s\n\n",
      o.shape.c_str(), o.batch, o.seq_len, o.batch * o.seq_len, o.steps, o.warmup,
      o.residual_dtype.empty() ? "" : ", bf16 training's residual stream in ",
      o.residual_dtype.c_str());
  std::printf("%-6s %-5s %8s %9s %10s %7s %6s %7s %8s %9s %8s %8s %8s\n", "arch", "prec", "params",
              "step_ms", "tokens/s", "GEMM%", "MFU", "peak", "MFU-now", "GEMM-eff", "act_MB",
              "peak_MB", "loss");
  std::vector<StepResult> results;
  Rng rng(1);
  for (const auto& arch : o.archs) {
    const ModelConfig config = plan::find_model(o.shape, parse_arch(arch));
    for (const auto& precision : o.precisions) {
      double& best = precision == "bf16" ? peak_bf16 : peak_fp32;
      best = std::max(best, measure_peak_gemm_gflops(parse_dtype(precision)));
      const double peak = best;
      const StepResult r = run_one(o, config, arch, precision, peak, rng);
      std::printf(
          "%-6s %-5s %7.1fM %9.1f %10.0f %6.1f%% %5.1f%% %7.0f %7.1f%% %8.1f%% %8.0f %8.0f %8.4f\n",
          r.arch.c_str(), r.precision.c_str(), r.params_m, r.step_ms, r.tokens_per_s,
          100 * r.gemm_share, 100 * r.mfu, r.peak_gflops, 100 * r.mfu_probe,
          100 * r.gemm_efficiency, r.activation_mb, r.peak_mb, r.loss);
      if (o.breakdown)
        std::printf("       ms/step:%s\n       GEMM shapes of one step (slowest first):\n%s",
                    breakdown_text(r.breakdown).c_str(), r.gemm_shapes.c_str());
      std::fflush(stdout);
      results.push_back(r);
    }
  }
  bool any = false;
  for (const auto& a : results)
    for (const auto& b : results)
      if (a.arch == b.arch && a.precision == "fp32" && b.precision == "bf16") {
        if (!any) std::printf("\nbf16 speed-up over fp32 (same model):");
        any = true;
        std::printf("  %s %.2fx", a.arch.c_str(), a.step_ms / b.step_ms);
      }
  if (any) std::printf("\n");
  return results;
}

nlohmann::json to_json(const StepBenchOptions& o, const std::vector<StepResult>& results) {
  nlohmann::json out = {{"shape", o.shape},     {"batch", o.batch},
                        {"seq_len", o.seq_len}, {"steps", o.steps},
                        {"warmup", o.warmup},   {"results", nlohmann::json::array()}};
  if (!o.residual_dtype.empty()) out["residual_dtype"] = o.residual_dtype;
  for (const auto& r : results)
    out["results"].push_back({{"arch", r.arch},
                              {"precision", r.precision},
                              {"params_m", r.params_m},
                              {"step_ms", r.step_ms},
                              {"min_step_ms", r.min_step_ms},
                              {"tokens_per_s", r.tokens_per_s},
                              {"gemm_share", r.gemm_share},
                              {"mfu", r.mfu},
                              {"mfu_probe", r.mfu_probe},
                              {"gemm_efficiency", r.gemm_efficiency},
                              {"activation_mb", r.activation_mb},
                              {"peak_mb", r.peak_mb},
                              {"peak_gflops", r.peak_gflops},
                              {"phases_ms", r.breakdown},
                              {"loss", r.loss}});
  return out;
}

}  // namespace boostlm::bench
