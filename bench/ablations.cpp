// The CPU counterparts of the paper's ablations (SPEC §5), at TP = the number of ranks:
//   - Online-RMSNorm vs the synchronous norm: time per block (forward + backward);
//   - linear-layer grouping on vs off: time per block (btp and naive-tp);
//   - activation checkpointing: memory kept per block and step time for none / lowrank / block,
//     and the checkpoint efficiency ΔMemory/ΔTime (memory saved over the whole model, per ms of
//     extra step time) of lowrank and block against none; naive-tp's block recomputation too.
// Configurations are interleaved and repeated; medians are reported.
//
//   mpirun -n 2 --map-by slot:PE=1 --bind-to hwthread -x OMP_NUM_THREADS=1 \
//       build/bench/bench_ablations --shape 60m       (plus the usual root/oversubscribe flags)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
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
#include "model/model.h"

using namespace boostlm;
using bench::median;
using bench::now_s;
using bench::peak_gemm_gflops;

namespace {

struct Config {
  std::string name;
  LayoutKind layout;
  BlockOptions options;
  std::unique_ptr<Model> model;
  std::vector<double> step_s, block_s;  // block: forward + backward of all blocks
  int64_t kept = 0;
};

}  // namespace

int main(int argc, char** argv) {
  mpi_start(&argc, &argv);
  CLI::App app{"boostlm ablations: Online-RMSNorm, grouping, activation checkpointing"};
  std::string shape = "60m", configs_dir = BOOSTLM_SOURCE_DIR "/configs", json_path,
              precision = "fp32";
  int64_t batch = 4, seq_len = 256;
  int steps = 3, warmup = 1;
  app.add_option("--shape", shape, "preset shape (configs/<shape>-cola.json)");
  app.add_option("--configs", configs_dir, "preset directory");
  app.add_option("--precision", precision, "fp32 or bf16")->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--batch-size,-b", batch, "sequences")->check(CLI::PositiveNumber);
  app.add_option("--seq-len,-t", seq_len, "tokens per sequence")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "timed repetitions")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed repetitions")->check(CLI::NonNegativeNumber);
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
    const bool root = grid.world_rank() == 0;
    const ModelConfig config = ModelConfig::load(configs_dir + "/" + shape + "-cola.json");
    const DType dtype = parse_dtype(precision);
    std::vector<Config> configs;
    auto add = [&](std::string name, LayoutKind layout, BlockOptions options) {
      Config c{std::move(name), layout, options, nullptr, {}, {}, 0};
      c.model = std::make_unique<Model>(config, dtype, layout, &grid.tp(), options);
      c.model->init_weights(1);
      configs.push_back(std::move(c));
    };
    add("btp online grouped", LayoutKind::btp, {true, true, Recompute::none});
    add("btp sync grouped", LayoutKind::btp, {false, true, Recompute::none});
    add("btp online ungrouped", LayoutKind::btp, {true, false, Recompute::none});
    add("btp recompute lowrank", LayoutKind::btp, {true, true, Recompute::lowrank});
    add("btp recompute block", LayoutKind::btp, {true, true, Recompute::block});
    add("naive-tp", LayoutKind::naive_tp, {true, true, Recompute::none});
    add("naive-tp recompute block", LayoutKind::naive_tp, {true, true, Recompute::block});
    add("naive-tp ungrouped", LayoutKind::naive_tp, {true, false, Recompute::none});

    Rng rng(3);
    std::vector<int32_t> tokens(batch * seq_len), targets(batch * seq_len);
    for (auto& x : tokens) x = static_cast<int32_t>(rng.below(config.vocab_size));
    for (auto& x : targets) x = static_cast<int32_t>(rng.below(config.vocab_size));
    for (int rep = 0; rep < warmup + steps; ++rep) {
      for (auto& c : configs) {
        grid.tp().barrier();
        Profile::global().clear();
        const double t0 = now_s();
        c.model->grads().zero();
        c.model->forward_backward(tokens.data(), targets.data(), batch, seq_len);
        grid.tp().barrier();
        const double dt = now_s() - t0;
        if (rep < warmup) continue;
        const auto& ph = Profile::global().seconds();
        c.step_s.push_back(dt);
        c.block_s.push_back((ph.count("block_forward") ? ph.at("block_forward") : 0) +
                            (ph.count("block_backward") ? ph.at("block_backward") : 0));
        c.kept = c.model->kept_bytes_per_block();
      }
    }
    const int64_t L = config.n_layers;
    nlohmann::json out = {{"shape", shape},         {"tp", grid.shape().tp},
                          {"batch", batch},         {"seq_len", seq_len},
                          {"precision", precision}, {"results", nlohmann::json::array()}};
    if (root) {
      std::printf("%s cola, %s, batch %ld x seq %ld, TP %d, median of %d\n\n", shape.c_str(),
                  precision.c_str(), batch, seq_len, grid.shape().tp, steps);
      std::printf("%-26s %9s %12s %12s %14s\n", "configuration", "step_ms", "block_us",
                  "kept_MB/blk", "ckpt MB/ms");
    }
    // Checkpoint efficiency against the same layout's `none` configuration.
    auto baseline = [&](const Config& c) -> const Config& {
      return c.layout == LayoutKind::btp ? configs[0] : configs[5];
    };
    for (const auto& c : configs) {
      const double step = median(c.step_s), block_us = median(c.block_s) / L * 1e6;
      const Config& base = baseline(c);
      double efficiency = 0;
      if (c.options.recompute != Recompute::none) {
        const double saved_mb = static_cast<double>(base.kept - c.kept) * L / 1e6;
        const double extra_ms = (step - median(base.step_s)) * 1e3;
        efficiency = extra_ms > 0 ? saved_mb / extra_ms : 0;
      }
      if (root)
        std::printf("%-26s %9.1f %12.0f %12.2f %14s\n", c.name.c_str(), step * 1e3, block_us,
                    c.kept / 1e6,
                    c.options.recompute == Recompute::none
                        ? "-"
                        : std::to_string(efficiency).substr(0, 7).c_str());
      out["results"].push_back({{"configuration", c.name},
                                {"step_ms", step * 1e3},
                                {"block_us", block_us},
                                {"kept_mb_per_block", c.kept / 1e6},
                                {"checkpoint_mb_per_ms", efficiency}});
    }
    if (root && !json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  } catch (const std::exception& e) {
    if (mpi_world_size() > 1) fail_job(std::string("bench_ablations: ") + e.what());
    std::fprintf(stderr, "bench_ablations: %s\n", e.what());
    return 1;
  }
  mpi_stop();
  return 0;
}
