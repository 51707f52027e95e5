// The paper's comparison on this machine: dense-tp (dense model), naive-tp and btp (low-rank
// model) side by side in one run, interleaved and repeated. Run it on t ranks (the TP size):
//
//   boostlm launch -n 2 --program build/bench/bench_layouts -- --shape 60m
//   mpirun -n 2 build/bench/bench_layouts --shape 60m       (with the usual root/oversubscribe
//   flags)
//
// For each layout: median step time (forward, backward, AdamW; all TP ranks aligned by a barrier),
// tokens/s, model FLOPs utilisation against the summed GEMM peak of the ranks, the TP collectives
// of one step per kind (calls, bytes) and the time inside them, and activation memory per rank.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "comm/grid.h"
#include "comm/mpi_runtime.h"
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

struct Run {
  std::string name;  // "dense-tp", "naive-tp", "btp"
  ModelConfig config;
  std::unique_ptr<Model> model;
  std::unique_ptr<AdamW> optimizer;
  std::vector<double> step_s, comm_s;
  CommCounts counts;  // one step's TP traffic
  float loss = 0;
};

}  // namespace

int main(int argc, char** argv) {
  mpi_start(&argc, &argv);
  CLI::App app{"boostlm layout benchmark: dense-tp vs naive-tp vs btp in one run"};
  std::string shape = "60m", configs_dir = BOOSTLM_SOURCE_DIR "/configs", json_path,
              precision = "fp32", low_rank = "cola";
  int64_t batch = 8, seq_len = 256;
  int steps = 5, warmup = 1;
  std::vector<std::string> layouts = {"dense-tp", "naive-tp", "btp"};
  app.add_option("--shape", shape, "preset shape (configs/<shape>-<arch>.json)");
  app.add_option("--configs", configs_dir, "preset directory");
  app.add_option("--low-rank", low_rank, "architecture for naive-tp and btp")
      ->check(CLI::IsMember({"cola", "svd"}));
  app.add_option("--layouts", layouts, "layouts to compare")
      ->check(CLI::IsMember({"dense-tp", "naive-tp", "btp"}));
  app.add_option("--precision", precision, "fp32 or bf16")->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--batch-size,-b", batch, "sequences per step")->check(CLI::PositiveNumber);
  app.add_option("--seq-len,-t", seq_len, "tokens per sequence")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "timed steps per layout (median reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--json", json_path, "also write the results as JSON");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    mpi_stop();
    return code;
  }

  try {
    ProcessGrid grid(GridShape{mpi_world_size(), 1, 1});
    const int t = grid.shape().tp;
    const bool root = grid.world_rank() == 0;
    const DType dtype = parse_dtype(precision);
    const double peak = peak_gemm_gflops(dtype) * t;
    std::vector<Run> runs;
    for (const auto& name : layouts) {
      Run r;
      r.name = name;
      const std::string arch = name == "dense-tp" ? "dense" : low_rank;
      r.config = ModelConfig::load(configs_dir + "/" + shape + "-" + arch + ".json");
      r.model = std::make_unique<Model>(r.config, dtype, parse_layout(name), &grid.tp());
      r.model->init_weights(1);
      r.optimizer = std::make_unique<AdamW>(r.model->params(), OptimizerConfig{});
      runs.push_back(std::move(r));
    }
    Rng rng(7);
    std::vector<int32_t> tokens(batch * seq_len), targets(batch * seq_len);
    for (auto& x : tokens) x = static_cast<int32_t>(rng.below(runs[0].config.vocab_size));
    for (auto& x : targets) x = static_cast<int32_t>(rng.below(runs[0].config.vocab_size));

    // Interleaved: every repetition runs each layout once, so drift in the machine's speed
    // affects all of them alike.
    for (int rep = 0; rep < warmup + steps; ++rep) {
      for (auto& r : runs) {
        grid.tp().barrier();
        Profile::global().clear();
        const CommCounts before = grid.tp().counts();
        const double t0 = now_s();
        r.model->grads().zero();
        r.loss = r.model->forward_backward(tokens.data(), targets.data(), batch, seq_len);
        const float norm = static_cast<float>(std::sqrt(r.model->grad_sum_squares()));
        r.optimizer->step(r.model->weights(), r.model->grads(), 1e-4f, norm);
        grid.tp().barrier();
        const double dt = now_s() - t0;
        if (rep < warmup) continue;
        r.step_s.push_back(dt);
        const auto& phases = Profile::global().seconds();
        r.comm_s.push_back(phases.count("comm") ? phases.at("comm") : 0.0);
        r.counts = grid.tp().counts() - before;
      }
    }

    if (root) {
      std::printf("%s, %s, batch %ld x seq %ld, TP %d (%d ranks on this machine), median of %d\n\n",
                  shape.c_str(), precision.c_str(), batch, seq_len, t, t, steps);
      std::printf("%-9s %-6s %9s %9s %6s %10s %8s %10s %8s %9s\n", "layout", "arch", "step_ms",
                  "tokens/s", "MFU", "TP MB", "TP calls", "comm_ms", "comm%", "act_MB");
    }
    nlohmann::json out = {{"shape", shape}, {"precision", precision},
                          {"batch", batch}, {"seq_len", seq_len},
                          {"tp", t},        {"results", nlohmann::json::array()}};
    const double base = runs.empty() ? 0 : median(runs.back().step_s);
    for (auto& r : runs) {
      const double step = median(r.step_s), comm = median(r.comm_s);
      const double mfu = model_flops(r.config, batch, seq_len).training() / step / (peak * 1e9);
      const double mb = r.counts.total_bytes() / 1e6;
      if (root) {
        std::printf("%-9s %-6s %9.1f %9.0f %5.1f%% %10.1f %8ld %10.1f %7.1f%% %9.0f\n",
                    r.name.c_str(), to_string(r.config.arch).c_str(), step * 1e3,
                    batch * seq_len / step, 100 * mfu, mb, r.counts.total_calls(), comm * 1e3,
                    100 * comm / step, r.model->activation_bytes() / 1e6);
      }
      nlohmann::json kinds = nlohmann::json::object();
      for (int k = 0; k < kCollectiveKinds; ++k)
        if (r.counts.by_kind[k].calls)
          kinds[to_string(static_cast<Collective>(k))] = {{"calls", r.counts.by_kind[k].calls},
                                                          {"bytes", r.counts.by_kind[k].bytes}};
      out["results"].push_back({{"layout", r.name},
                                {"arch", to_string(r.config.arch)},
                                {"step_ms", step * 1e3},
                                {"tokens_per_s", batch * seq_len / step},
                                {"mfu", mfu},
                                {"comm_ms", comm * 1e3},
                                {"tp_comm", kinds},
                                {"activation_mb", r.model->activation_bytes() / 1e6},
                                {"loss", r.loss}});
    }
    if (root && runs.size() > 1) {
      std::printf("\nstep time relative to %s:", runs.back().name.c_str());
      for (auto& r : runs) std::printf("  %s %.2fx", r.name.c_str(), median(r.step_s) / base);
      std::printf("\n");
    }
    if (root && !json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  } catch (const std::exception& e) {
    if (mpi_world_size() > 1) fail_job(std::string("bench_layouts: ") + e.what());
    std::fprintf(stderr, "bench_layouts: %s\n", e.what());
    return 1;
  }
  mpi_stop();
  return 0;
}
