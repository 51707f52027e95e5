#include "bench/gemm_bench.h"

#include <cstdio>
#include <string>

#include "core/error.h"
#include "kernels/gemm_measure.h"
#include "model/params.h"
#include "plan/models.h"

namespace boostlm::bench {

namespace {

const std::array<const char*, 2> kLayouts = {"naive-tp", "btp"};

// The slowest rank's rate: every rank measures at once.
double measure_on_all(Communicator& sync, int64_t M, int64_t N, int64_t K, DType dtype, int reps) {
  sync.barrier();
  auto seconds_per_gflop = static_cast<float>(1.0 / measure_gemm_gflops(M, N, K, dtype, reps));
  sync.all_reduce_max_host(&seconds_per_gflop, 1);
  return 1.0 / seconds_per_gflop;
}

// The best rate any rank reached on the peak's products.
double measure_peak_on_all(Communicator& sync, DType dtype) {
  sync.barrier();
  auto peak = static_cast<float>(measure_peak_gemm_gflops(dtype));
  sync.all_reduce_max_host(&peak, 1);
  return peak;
}

std::string short_name(const char* module) {  // "self_attn.q_proj" → "q_proj"
  const std::string name(module);
  const auto dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

}  // namespace

std::array<double, 2> GemmBenchReport::block_gflops(const std::string& layout) const {
  double flops = 0;
  std::array<double, 2> seconds{};
  for (const auto& row : rows) {
    if (row.layout != layout) continue;
    const double f = 2.0 * row.M * row.N * row.K / 1e9;
    flops += f;
    for (int p = 0; p < 2; ++p) seconds[p] += f / row.gflops[p];
  }
  return {seconds[0] > 0 ? flops / seconds[0] : 0, seconds[1] > 0 ? flops / seconds[1] : 0};
}

GemmBenchReport run_gemm_bench(Communicator& sync, const GemmBenchOptions& o) {
  const ModelConfig c = plan::find_model(o.shape, o.arch);
  if (!c.low_rank()) throw error("bench gemm: ", o.shape, " is a dense model; give a low-rank one");
  GemmBenchReport report;
  report.options = o;
  report.ranks = sync.size();
  for (int p = 0; p < 2; ++p) report.peak_gflops[p] = measure_peak_on_all(sync, kGemmPrecisions[p]);
  const int64_t t = o.tp;
  for (const char* layout : kLayouts) {
    const bool naive = std::string(layout) == "naive-tp";
    for (const auto& proj : block_projections(c)) {
      if (proj.rank % t || proj.d_in % t || proj.d_out % t)
        throw error("bench gemm: ", proj.module, " (", proj.d_in, " -> ", proj.rank, " -> ",
                    proj.d_out, ") does not split over tp=", t);
      // A: x[N, d_in] · A[d_in, r];  B: latent[N, r] · B[r, d_out], on one rank.
      const int64_t latent = naive ? proj.rank / t : proj.rank;
      const int64_t a_in = naive ? proj.d_in : proj.d_in / t;
      const int64_t b_out = naive ? proj.d_out : proj.d_out / t;
      for (GemmRow row :
           {GemmRow{layout, short_name(proj.module), 'A', o.tokens, latent, a_in, {}},
            GemmRow{layout, short_name(proj.module), 'B', o.tokens, b_out, latent, {}}}) {
        for (int p = 0; p < 2; ++p)
          row.gflops[p] = measure_on_all(sync, row.M, row.N, row.K, kGemmPrecisions[p], o.reps);
        report.rows.push_back(row);
      }
    }
  }
  return report;
}

nlohmann::json to_json(const GemmBenchReport& report) {
  const GemmBenchOptions& o = report.options;
  nlohmann::json out = {
      {"shape", o.shape},
      {"arch", to_string(o.arch)},
      {"tp", o.tp},
      {"tokens", o.tokens},
      {"ranks", report.ranks},
      {"peak_gflops", {{"fp32", report.peak_gflops[0]}, {"bf16", report.peak_gflops[1]}}},
      {"rows", nlohmann::json::array()},
      {"block", nlohmann::json::object()}};
  for (const auto& r : report.rows) {
    out["rows"].push_back({{"layout", r.layout},
                           {"projection", r.projection},
                           {"factor", std::string(1, r.factor)},
                           {"m", r.M},
                           {"n", r.N},
                           {"k", r.K},
                           {"fp32_gflops", r.gflops[0]},
                           {"fp32_of_peak", r.gflops[0] / report.peak_gflops[0]},
                           {"bf16_gflops", r.gflops[1]},
                           {"bf16_of_peak", r.gflops[1] / report.peak_gflops[1]}});
  }
  for (const char* layout : kLayouts) {
    const auto g = report.block_gflops(layout);
    out["block"][layout] = {{"fp32_gflops", g[0]},
                            {"fp32_of_peak", g[0] / report.peak_gflops[0]},
                            {"bf16_gflops", g[1]},
                            {"bf16_of_peak", g[1] / report.peak_gflops[1]}};
  }
  return out;
}

void print_gemm_table(const GemmBenchReport& report) {
  const GemmBenchOptions& o = report.options;
  std::printf(
      "%s (%s), TP %d, %ld tokens, %d rank(s) measuring at once; peak (best n^3) fp32 %.0f, "
      "bf16 %.0f GFLOP/s per rank\n\n",
      o.shape.c_str(), to_string(o.arch).c_str(), o.tp, o.tokens, report.ranks,
      report.peak_gflops[0], report.peak_gflops[1]);
  std::printf("%-8s %-10s %-6s %18s %10s %7s %10s %7s\n", "layout", "projection", "factor",
              "M x N x K", "fp32 GF/s", "of peak", "bf16 GF/s", "of peak");
  for (const auto& r : report.rows) {
    char dims[48];
    std::snprintf(dims, sizeof dims, "%ldx%ldx%ld", r.M, r.N, r.K);
    std::printf("%-8s %-10s %-6c %18s %10.1f %6.0f%% %10.1f %6.0f%%\n", r.layout.c_str(),
                r.projection.c_str(), r.factor, dims, r.gflops[0],
                100 * r.gflops[0] / report.peak_gflops[0], r.gflops[1],
                100 * r.gflops[1] / report.peak_gflops[1]);
  }
  std::printf("\nall projection GEMMs of a block:\n");
  for (const char* layout : kLayouts) {
    const auto g = report.block_gflops(layout);
    std::printf("  %-8s fp32 %.1f GFLOP/s (%.0f%% of peak)   bf16 %.1f GFLOP/s (%.0f%% of peak)\n",
                layout, g[0], 100 * g[0] / report.peak_gflops[0], g[1],
                100 * g[1] / report.peak_gflops[1]);
  }
}

}  // namespace boostlm::bench
