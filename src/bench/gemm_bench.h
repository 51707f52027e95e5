// `boostlm bench gemm`: the per-rank GEMM shapes of naive-tp and btp (SPEC §3.2–3.3) for a preset
// and TP size, the CPU counterpart of the paper's GEMM-utilisation figure. Under naive-tp a
// projection's factors become d_in → r/t (A, column-parallel) and r/t → d_out (B, row-parallel):
// the latent, and with it B's contraction, shrinks with t. Under btp they are d_in/t → r (A,
// row-parallel) and r → d_out/t (B, column-parallel): the latent keeps its width.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "core/dtype.h"
#include "model/config.h"

namespace boostlm::bench {

struct GemmBenchOptions {
  std::string shape = "60m";  // a preset (configs/<shape>-<arch>.json) or a config file
  Arch arch = Arch::cola;
  int tp = 2;
  int64_t tokens = 2048;  // rows of the activations: micro-batch × sequence
  int reps = 5;           // fastest of these after a warm-up
};

// Index 0: fp32, 1: bf16.
constexpr std::array<DType, 2> kGemmPrecisions = {DType::f32, DType::bf16};

struct GemmRow {
  std::string layout, projection;  // "naive-tp" / "btp"; "q_proj" ...
  char factor;                     // 'A' (x → latent) or 'B' (latent → y)
  int64_t M, N, K;                 // C[M, N] = X[M, K] · W[K, N] on one rank
  std::array<double, 2> gflops;
};

struct GemmBenchReport {
  GemmBenchOptions options;
  int ranks = 1;  // ranks measuring at once (each with its share of the cores)
  std::array<double, 2> peak_gflops{};
  std::vector<GemmRow> rows;
  // All of a block's projection GEMMs of one layout together: FLOPs over the summed seconds.
  std::array<double, 2> block_gflops(const std::string& layout) const;
};

// Every rank of `sync` measures the same shapes at once (each rate is the slowest rank's, as a
// TP step waits for it); run it on one rank per core to see the cores shared as in training.
GemmBenchReport run_gemm_bench(Communicator& sync, const GemmBenchOptions& options);

nlohmann::json to_json(const GemmBenchReport& report);
void print_gemm_table(const GemmBenchReport& report);

}  // namespace boostlm::bench
