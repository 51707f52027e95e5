#include "bench/device_step.h"

#include <cstdio>
#include <map>
#include <utility>

#include "core/error.h"
#include "core/rng.h"
#include "engine/model.h"
#include "kernels/backend.h"
#include "model/flops.h"
#include "plan/hardware.h"
#include "plan/models.h"
#include "train/optimizer.h"
#include "train/step.h"

namespace boostlm::bench {

namespace {

constexpr float kLr = 1e-4f;

const DeviceCounterHooks& hooks() {
  return active_kernels().counters;
}

// Warm-up step first (the caching allocator's first allocations, plans), then the counted one:
// with --cuda-graph on, the second step captures its graphs (the whole step, for the process
// alone here) and launches them, which counts as every later step would (graph nodes, one host
// launch per graph).
DeviceStepResult run_one(const DeviceStepOptions& o, ModelConfig config, const std::string& arch,
                         const std::string& precision, const plan::Device& device) {
  if (o.layers > 0) config.n_layers = o.layers;
  const int64_t B = o.batch, T = o.seq_len;
  if (T > config.max_seq_len) config.max_seq_len = T;
  Rng rng(1);
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.below(config.vocab_size));
  for (auto& t : targets) t = static_cast<int32_t>(rng.below(config.vocab_size));
  const DType dtype = parse_dtype(precision);
  if (o.count_only) hooks().set_count_only(true);
  DeviceStepResult r;
  try {
    BlockOptions options;
    if (!o.residual_dtype.empty()) options.residual = parse_dtype(o.residual_dtype);
    Model model(config, dtype, {}, nullptr, options);
    // Counted, not run, a step reads no weight: the 1B's initialisation alone (a normal draw per
    // weight on the host) was ~40% of a count-only run's minutes (issue 63).
    if (!o.count_only) model.init_weights(1);
    AdamW optimizer(model.params(), OptimizerConfig{});
    Pipeline pipeline(model);
    const MicroBatch batch{tokens.data(), targets.data()};
    training_step(pipeline, optimizer, batch, B, T, kLr);
    hooks().reset();
    r.loss = training_step(pipeline, optimizer, batch, B, T, kLr);
    r.params_m = model.params().parameter_count() / 1e6;
  } catch (...) {
    if (o.count_only) hooks().set_count_only(false);
    throw;
  }
  if (o.count_only) hooks().set_count_only(false);
  r.arch = arch;
  r.precision = precision;
  r.layers = config.n_layers;
  r.model_flops = model_flops(config, B, T).training();
  r.roofline = plan::price_kernels(device, hooks().read());
  r.peak_flops = device.curve(dtype).peak_flops;
  r.gemm_max_efficiency = device.curve(DType::bf16).max_efficiency;
  return r;
}

std::string human(double x) {
  char text[32];
  const char* units[] = {"", "k", "M", "G", "T", "P"};
  int u = 0;
  while (x >= 1000 && u < 5) {
    x /= 1000;
    ++u;
  }
  std::snprintf(text, sizeof text, "%.3g%s", x, units[u]);
  return text;
}

void print_result(const DeviceStepOptions& o, const DeviceStepResult& r,
                  const std::string& hardware) {
  const plan::Roofline& f = r.roofline;
  std::printf("\n%s %s, %d layers, %.1fM parameters, batch %ld x %ld%s\n", r.arch.c_str(),
              r.precision.c_str(), r.layers, r.params_m, o.batch, o.seq_len,
              o.count_only ? " (count-only: kernels counted, not run)" : "");
  std::printf(
      "  launches per step %lu (%lu undeclared; %lu from the host, %lu as nodes of CUDA "
      "graphs); model FLOPs %s; tensor-core FLOPs %s, CUDA-core matrix FLOPs %s: %.2f%% "
      "on tensor cores; global memory %sB\n",
      f.launches, f.undeclared, f.launches - f.graph_launches, f.graph_launches,
      human(r.model_flops).c_str(), human(f.tensor_flops).c_str(), human(f.other_flops).c_str(),
      100 * f.tensor_share(), human(f.bytes).c_str());
  std::printf(
      "  predicted on %s (a roofline of the counted kernels, not a measurement): "
      "%.3f ms per step, of which %.3f ms launch overhead; MFU %.1f%%\n",
      hardware.c_str(), f.seconds * 1e3, f.overhead_s * 1e3, 100 * r.mfu());
  // Where the time goes, by kind of kernel (launch overheads apart).
  std::map<std::string, std::pair<double, uint64_t>> by_class;
  for (const plan::RooflineRow& row : f.rows) {
    auto& [seconds, launches] = by_class[plan::to_string(row.kind)];
    seconds += row.seconds() - row.overhead_s;
    launches += row.count.launches;
  }
  std::printf("  by kind:");
  for (const auto& [kind, value] : by_class)
    std::printf(" %s %.2f ms (%.1f%%, %lu launches);", kind.c_str(), value.first * 1e3,
                100 * value.first / f.seconds, value.second);
  std::printf(" launch overhead %.2f ms (%.1f%%)\n", f.overhead_s * 1e3,
              100 * f.overhead_s / f.seconds);
  // How far this design can go on this device: the same kernels with their bytes free, then with
  // attention also at the GEMMs' best (model FLOPs over each).
  const double bf16_best = r.gemm_max_efficiency;
  std::printf(
      "  ceilings of these kernels (prediction): every byte and launch free %.3f ms, MFU "
      "%.1f%%; attention also at the bf16 GEMMs' best (%.0f%% of peak) %.3f ms, MFU "
      "%.1f%%\n",
      f.flops_only_s * 1e3, 100 * r.mfu_at(f.flops_only_s), 100 * bf16_best,
      f.flops_only_attention_at_gemm_s * 1e3, 100 * r.mfu_at(f.flops_only_attention_at_gemm_s));
  std::printf("  %-58s %9s %9s %9s %9s %9s %7s %6s %s\n", "kernel", "launches", "tensor",
              "cuda-core", "bytes", "pred. ms", "share", "bound", "class");
  int shown = 0;
  for (const plan::RooflineRow& row : f.rows) {
    if (shown++ == o.top) {
      std::printf("  ... %zu more kernels\n", f.rows.size() - o.top);
      break;
    }
    const DeviceKernelCount& c = row.count;
    std::string name = c.kernel.size() > 58 ? c.kernel.substr(0, 55) + "..." : c.kernel;
    std::printf("  %-58s %9lu %9s %9s %9s %9.3f %6.1f%% %6s %s\n", name.c_str(), c.launches,
                human(c.tensor_flops).c_str(), human(c.other_flops).c_str(),
                human(c.bytes_read + c.bytes_written).c_str(), row.seconds() * 1e3,
                100 * row.seconds() / f.seconds, row.memory_bound() ? "memory" : "compute",
                plan::to_string(row.kind));
  }
}

}  // namespace

double DeviceStepResult::mfu() const {
  return mfu_at(roofline.seconds);
}

double DeviceStepResult::mfu_at(double seconds) const {
  return seconds > 0 ? model_flops / seconds / peak_flops : 0.0;
}

bool device_counts_kernels() {
  return hooks().read != nullptr;
}

std::vector<DeviceStepResult> run_device_step_bench(const DeviceStepOptions& o) {
  if (!device_counts_kernels())
    throw error(
        "bench step: the kernel counters need the emulated CUDA device (a "
        "-DBOOSTLM_CUDA=EMULATE build with --device cuda)");
  const plan::Hardware hardware = plan::load_hardware(o.hardware);
  std::vector<DeviceStepResult> results;
  for (const auto& arch : o.archs) {
    const ModelConfig config = plan::find_model(o.shape, parse_arch(arch));
    for (const auto& precision : o.precisions) {
      results.push_back(run_one(o, config, arch, precision, hardware.device));
      print_result(o, results.back(), hardware.name);
      std::fflush(stdout);
    }
  }
  return results;
}

nlohmann::json to_json(const DeviceStepOptions& o, const std::vector<DeviceStepResult>& results) {
  nlohmann::json out = {{"shape", o.shape},
                        {"batch", o.batch},
                        {"seq_len", o.seq_len},
                        {"count_only", o.count_only},
                        {"residual_dtype", o.residual_dtype.empty() ? "default" : o.residual_dtype},
                        {"hardware", o.hardware},
                        {"prediction", true},
                        {"results", nlohmann::json::array()}};
  for (const auto& r : results) {
    nlohmann::json kernels = nlohmann::json::array();
    for (const plan::RooflineRow& row : r.roofline.rows) {
      const DeviceKernelCount& c = row.count;
      kernels.push_back({{"kernel", c.kernel},
                         {"launches", c.launches},
                         {"graph_launches", c.graph_launches},
                         {"tensor_flops", c.tensor_flops},
                         {"cuda_core_flops", c.other_flops},
                         {"bytes_read", c.bytes_read},
                         {"bytes_written", c.bytes_written},
                         {"undeclared", c.undeclared},
                         {"class", plan::to_string(row.kind)},
                         {"predicted_s", row.seconds()},
                         {"memory_bound", row.memory_bound()}});
    }
    const plan::Roofline& f = r.roofline;
    out["results"].push_back(
        {{"arch", r.arch},
         {"precision", r.precision},
         {"layers", r.layers},
         {"params_m", r.params_m},
         {"model_flops", r.model_flops},
         {"launches", f.launches},
         {"graph_launches", f.graph_launches},
         {"undeclared_launches", f.undeclared},
         {"tensor_flops", f.tensor_flops},
         {"cuda_core_flops", f.other_flops},
         {"tensor_share", f.tensor_share()},
         {"bytes", f.bytes},
         {"predicted_step_s", f.seconds},
         {"predicted_overhead_s", f.overhead_s},
         {"predicted_mfu", r.mfu()},
         {"ceiling_bytes_free_s", f.flops_only_s},
         {"ceiling_bytes_free_mfu", r.mfu_at(f.flops_only_s)},
         {"ceiling_attention_at_gemm_s", f.flops_only_attention_at_gemm_s},
         {"ceiling_attention_at_gemm_mfu", r.mfu_at(f.flops_only_attention_at_gemm_s)},
         {"loss", r.loss},
         {"kernels", kernels}});
  }
  return out;
}

}  // namespace boostlm::bench
