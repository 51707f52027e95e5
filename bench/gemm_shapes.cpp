// The per-rank GEMM shapes of naive-tp and btp (SPEC §3.2–3.3) for a preset and TP size: the CPU
// counterpart of the paper's GEMM-utilisation figure. Under naive-tp a projection's factors become
// d_in → r/t (A, column-parallel) and r/t → d_out (B, row-parallel): the contraction dimension of
// B shrinks with t. Under btp they are d_in/t → r and r → d_out/t: the latent keeps its width.
// For each forward GEMM of a block, fp32 and bf16: GFLOP/s and the fraction of this machine's
// peak (a 2048³ GEMM measured in the same run).
//
//   build/bench/bench_gemm_shapes --shape 60m --tp 2
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_util.h"
#include "core/error.h"
#include "model/config.h"
#include "model/params.h"

using namespace boostlm;
using bench::now_s;

namespace {

// GFLOP/s of C[M,N] = A[M,K]·B[K,N], best of `reps`.
double rate(int64_t M, int64_t N, int64_t K, DType dtype, int reps = 5) {
  std::vector<float> a(M * K, 0.01f), b(K * N, 0.01f), c(M * N);
  // In training the bf16 operands arrive rounded (weights once per step, shared inputs once), so
  // the rounding is done here beforehand and only the GEMM is timed.
  std::vector<bf16_t> a16(a.size()), b16(b.size());
  round_to_bf16(a.data(), 1, a.size(), a.size(), a16.data());
  round_to_bf16(b.data(), 1, b.size(), b.size(), b16.data());
  const bool bf16 = dtype == DType::bf16;
  const GemmInput A(a.data(), bf16 ? a16.data() : nullptr, K),
      B(b.data(), bf16 ? b16.data() : nullptr, N);
  double best = 1e30;
  for (int i = 0; i <= reps; ++i) {
    const double t0 = now_s();
    gemm(Trans::N, Trans::N, M, N, K, 1.0f, A, B, 0.0f, c.data(), N, dtype);
    if (i) best = std::min(best, now_s() - t0);
  }
  return 2.0 * M * N * K / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"boostlm GEMM shapes of naive-tp and btp"};
  std::string shape = "60m", configs_dir = BOOSTLM_SOURCE_DIR "/configs";
  int tp = 2;
  int64_t tokens = 2048;
  app.add_option("--shape", shape, "preset shape (configs/<shape>-cola.json)");
  app.add_option("--configs", configs_dir, "preset directory");
  app.add_option("--tp", tp, "tensor-parallel size")->check(CLI::PositiveNumber);
  app.add_option("--tokens", tokens, "rows of the activations (micro-batch x sequence)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    const ModelConfig c = ModelConfig::load(configs_dir + "/" + shape + "-cola.json");
    const double peak32 = bench::peak_gemm_gflops(DType::f32, 2048, 3);
    const double peak16 = bench::peak_gemm_gflops(DType::bf16, 2048, 3);
    std::printf("%s cola, TP %d, %ld tokens; peak fp32 %.0f, bf16 %.0f GFLOP/s\n\n", shape.c_str(),
                tp, tokens, peak32, peak16);
    std::printf("%-8s %-9s %-4s %18s %9s %7s %9s %7s\n", "layout", "proj", "half", "M x N x K",
                "fp32 GF/s", "of peak", "bf16 GF/s", "of peak");
    double flops[2] = {0, 0}, seconds[2][2] = {{0, 0}, {0, 0}};
    for (int layout = 0; layout < 2; ++layout) {  // 0: naive-tp, 1: btp
      for (const auto& p : block_projections(c)) {
        const int64_t r = p.rank;
        // A: x[N, d_in] · A[d_in, r];  B: latent[N, r] · B[r, d_out], per rank.
        const int64_t a_in = layout == 0 ? p.d_in : p.d_in / tp, a_r = layout == 0 ? r / tp : r;
        const int64_t b_r = a_r, b_out = layout == 0 ? p.d_out : p.d_out / tp;
        const int64_t shapes[2][3] = {{tokens, a_r, a_in}, {tokens, b_out, b_r}};
        for (int half = 0; half < 2; ++half) {
          const auto [M, N, K] = std::tuple{shapes[half][0], shapes[half][1], shapes[half][2]};
          const double g32 = rate(M, N, K, DType::f32), g16 = rate(M, N, K, DType::bf16);
          const double f = 2.0 * M * N * K / 1e9;
          flops[layout] += f;
          seconds[layout][0] += f / g32;
          seconds[layout][1] += f / g16;
          char dims[40];
          std::snprintf(dims, sizeof dims, "%ldx%ldx%ld", M, N, K);
          std::printf("%-8s %-9s %-4s %18s %9.0f %6.0f%% %9.0f %6.0f%%\n",
                      layout == 0 ? "naive-tp" : "btp", p.module + (p.module[0] == 's' ? 10 : 4),
                      half == 0 ? "A" : "B", dims, g32, 100 * g32 / peak32, g16,
                      100 * g16 / peak16);
        }
      }
    }
    std::printf("\nblock projections, whole:\n");
    for (int layout = 0; layout < 2; ++layout)
      std::printf("  %-8s fp32 %.0f GF/s (%.0f%% of peak)   bf16 %.0f GF/s (%.0f%% of peak)\n",
                  layout == 0 ? "naive-tp" : "btp", flops[layout] / seconds[layout][0],
                  100 * flops[layout] / seconds[layout][0] / peak32,
                  flops[layout] / seconds[layout][1],
                  100 * flops[layout] / seconds[layout][1] / peak16);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm_shapes: %s\n", e.what());
    return 1;
  }
  return 0;
}
