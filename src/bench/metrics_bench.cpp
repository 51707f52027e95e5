#include "bench/metrics_bench.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "bench/timing.h"
#include "core/file_io.h"
#include "train/run_dir.h"

namespace boostlm::bench {

namespace {

namespace fs = std::filesystem;

// A metrics line as a TP 2 step with validation and a save writes it (its numbers do not matter:
// its size and its number of scalars do).
nlohmann::json sample_line() {
  return nlohmann::json::parse(R"({"activation_mb": 0.0897, "grad_norm": 1.7107366323471,
      "comm": {"dp": {}, "pp": {}, "tp": {"all_reduce": {"calls": 40, "bytes": 1310720},
                                        "all_gather": {"calls": 8, "bytes": 65536}}},
      "loss": 5.667858123779297, "lr": 0.0007750000222586095, "mfu": 0.03318007412526789,
      "optimizer_state_mb": 0.224512, "peak_rss_mb": 238.734375, "peak_rss_mb_max": 240.5,
      "save": {"async": true, "checkpoint": "step_000003", "stall_ms": 0.8357, "wait_ms": 0.0009},
      "step": 3, "step_ms": 0.5143819998920662, "threads": 1, "tokens_per_s": 62210.575033,
      "tokens_seen": 96, "val_loss": 5.641757011413574})");
}

// The median microseconds of one append, over `steps` appends to a fresh log.
double time_appends(const fs::path& dir, bool event_file, int steps) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  MetricsLog log((dir / "metrics.jsonl").string(), -1, event_file);
  nlohmann::json line = sample_line();
  std::vector<double> us;
  for (int step = 1; step <= steps; ++step) {
    line["step"] = step;
    const auto start = std::chrono::steady_clock::now();
    log.append(line);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  return median(us);
}

}  // namespace

nlohmann::json run_metrics_bench(const MetricsBenchOptions& options) {
  const fs::path scratch =
      fs::path(options.dir) / ("boostlm_bench_metrics." + std::to_string(::getpid()));
  std::vector<double> off, on;
  time_appends(scratch, true, std::min(options.steps, 100));  // warm-up: page cache, allocator
  for (int r = 0; r < std::max(1, options.repeats); ++r) {    // interleaved: the same load for both
    off.push_back(time_appends(scratch, false, options.steps));
    on.push_back(time_appends(scratch, true, options.steps));
  }
  fs::remove_all(scratch);
  const double off_us = median(off), on_us = median(on);
  std::printf("bench metrics: metrics.jsonl alone          %8.1f us per step\n", off_us);
  std::printf(
      "bench metrics: with the TensorBoard events  %8.1f us per step (events: %.1f us; "
      "median of %zu x %d steps in %s)\n",
      on_us, on_us - off_us, on.size(), options.steps, options.dir.c_str());
  return {{"steps", options.steps},  {"repeats", on.size()},  {"dir", options.dir},
          {"append_us_off", off_us}, {"append_us_on", on_us}, {"event_us", on_us - off_us}};
}

}  // namespace boostlm::bench
