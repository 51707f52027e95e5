// Single-process training-step benchmark (issue: core engine).
//
// For each architecture and precision: median time of a full training step (zero grads, forward,
// backward, AdamW), tokens/s, the share of the step spent inside GEMM calls, model FLOPs
// utilisation against the peak GEMM rate measured in this same run, and "GEMM efficiency": the
// step's model FLOP rate divided by the rate its own GEMMs reach when replayed alone (shape by
// shape, same order). 100% would mean non-GEMM work costs nothing.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "core/error.h"
#include "core/profile.h"
#include "core/rng.h"
#include "kernels/gemm.h"
#include "model/flops.h"
#include "model/model.h"
#include "train/optimizer.h"

using namespace boostlm;
using bench::median;
using bench::now_s;
using bench::peak_gemm_gflops;

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

struct Result {
  std::string arch, precision;
  double params_m, step_ms, tokens_per_s, gemm_share, mfu, gemm_efficiency, model_tflops_per_s;
  double activation_mb;
  float loss;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"boostlm single-process training-step benchmark"};
  std::string shape = "60m", configs_dir = BOOSTLM_SOURCE_DIR "/configs", json_path;
  int64_t batch = 8, seq_len = 256;
  int steps = 5, warmup = 2;
  std::vector<std::string> archs = {"dense", "svd", "cola"}, precisions = {"fp32", "bf16"};
  app.add_option("--shape", shape, "preset shape (configs/<shape>-<arch>.json)");
  app.add_option("--configs", configs_dir, "preset directory");
  app.add_option("--arch", archs, "architectures")->check(CLI::IsMember({"dense", "svd", "cola"}));
  app.add_option("--precision", precisions, "precisions")->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--batch-size,-b", batch, "sequences per step")->check(CLI::PositiveNumber);
  app.add_option("--seq-len,-t", seq_len, "tokens per sequence")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "timed steps (median reported)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  bool verbose = false;
  app.add_flag("--breakdown", verbose, "print milliseconds per step in each kernel family");
  app.add_option("--json", json_path, "also write results as JSON here");
  CLI11_PARSE(app, argc, argv);

  try {
    const double peak_fp32 = peak_gemm_gflops(DType::f32, 2048, 3);
    const double peak_bf16 = peak_gemm_gflops(DType::bf16, 2048, 3);
    std::printf(
        "peak GEMM (2048^3, this machine, this run): fp32 %.1f GFLOP/s, bf16 %.1f GFLOP/s\n",
        peak_fp32, peak_bf16);
    std::printf(
        "shape %s, batch %ld x seq %ld = %ld tokens/step, median of %d steps after %d warm-up\n\n",
        shape.c_str(), batch, seq_len, batch * seq_len, steps, warmup);
    std::printf("%-6s %-5s %8s %9s %10s %7s %6s %9s %8s %8s\n", "arch", "prec", "params", "step_ms",
                "tokens/s", "GEMM%", "MFU", "GEMM-eff", "act_MB", "loss");

    std::vector<Result> results;
    Rng rng(1);
    for (const auto& arch : archs) {
      const ModelConfig config =
          ModelConfig::load(configs_dir + "/" + shape + "-" + arch + ".json");
      std::vector<int32_t> tokens(batch * seq_len), targets(batch * seq_len);
      for (auto& t : tokens) t = static_cast<int32_t>(rng.below(config.vocab_size));
      for (auto& t : targets) t = static_cast<int32_t>(rng.below(config.vocab_size));
      const ModelFlops flops = model_flops(config, batch, seq_len);
      for (const auto& precision : precisions) {
        const DType dtype = parse_dtype(precision);
        Model model(config, dtype);
        model.init_weights(1);
        AdamW optimizer(model.params(), OptimizerConfig{});
        std::vector<double> step_s, gemm_s;
        float loss = 0;
        for (int s = 0; s < warmup + steps; ++s) {
          if (s == warmup) {
            gemm_record_shapes(true);
            Profile::global().clear();
          }
          const GemmCounters before = gemm_counters();
          const double t0 = now_s();
          model.grads().zero();
          loss = model.forward_backward(tokens.data(), targets.data(), batch, seq_len);
          optimizer.step(model.weights(), model.grads(), 1e-4f);
          const double dt = now_s() - t0;
          if (s == warmup) gemm_record_shapes(false);
          if (s >= warmup) {
            step_s.push_back(dt);
            gemm_s.push_back(gemm_counters().seconds - before.seconds);
          }
        }
        std::string breakdown;
        double accounted = 0;
        for (const auto& [phase, seconds] : Profile::global().seconds()) {
          // Whole-block phases contain the kernel phases; they are listed, not summed.
          const bool outer = phase == "block_forward" || phase == "block_backward";
          breakdown += " " + phase + (outer ? "(incl.) " : " ") +
                       std::to_string(seconds / steps * 1e3).substr(0, 6);
          if (!outer) accounted += seconds;
        }
        const double step_total = std::accumulate(step_s.begin(), step_s.end(), 0.0);
        breakdown +=
            " other " + std::to_string((step_total - accounted) / steps * 1e3).substr(0, 6);
        const double isolated = replay_gemms(gemm_recorded_shapes(), 3);
        gemm_clear_recorded_shapes();
        const double step = median(step_s);
        const double peak = dtype == DType::f32 ? peak_fp32 : peak_bf16;
        const double rate = flops.training() / step;
        const double gemm_flops = 3 * (flops.projections + flops.head);
        Result r{arch,
                 precision,
                 model.params().parameter_count() / 1e6,
                 step * 1e3,
                 batch * seq_len / step,
                 median(gemm_s) / step,
                 rate / (peak * 1e9),
                 rate / (gemm_flops / isolated),
                 rate / 1e12,
                 model.activation_bytes() / 1e6,
                 loss};
        std::printf("%-6s %-5s %7.1fM %9.1f %10.0f %6.1f%% %5.1f%% %8.1f%% %8.0f %8.4f\n",
                    r.arch.c_str(), r.precision.c_str(), r.params_m, r.step_ms, r.tokens_per_s,
                    100 * r.gemm_share, 100 * r.mfu, 100 * r.gemm_efficiency, r.activation_mb,
                    r.loss);
        if (verbose) std::printf("       ms/step:%s\n", breakdown.c_str());
        std::fflush(stdout);
        results.push_back(r);
      }
    }
    std::printf("\nbf16 speed-up over fp32 (same model):");
    for (const auto& a : results)
      for (const auto& b : results)
        if (a.arch == b.arch && a.precision == "fp32" && b.precision == "bf16")
          std::printf("  %s %.2fx", a.arch.c_str(), a.step_ms / b.step_ms);
    std::printf("\n");
    if (!json_path.empty()) {
      nlohmann::json out = {{"shape", shape},
                            {"batch", batch},
                            {"seq_len", seq_len},
                            {"peak_gflops", {{"fp32", peak_fp32}, {"bf16", peak_bf16}}},
                            {"results", nlohmann::json::array()}};
      for (const auto& r : results)
        out["results"].push_back({{"arch", r.arch},
                                  {"precision", r.precision},
                                  {"params_m", r.params_m},
                                  {"step_ms", r.step_ms},
                                  {"tokens_per_s", r.tokens_per_s},
                                  {"gemm_share", r.gemm_share},
                                  {"mfu", r.mfu},
                                  {"gemm_efficiency", r.gemm_efficiency},
                                  {"activation_mb", r.activation_mb},
                                  {"loss", r.loss}});
      std::ofstream(json_path) << out.dump(2) << "\n";
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_train_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
