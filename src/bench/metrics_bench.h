// `boostlm bench metrics`: what a step's metrics cost rank 0, metrics.jsonl alone against
// metrics.jsonl with the TensorBoard event file (train/run_dir.h, MetricsLog::append), on a metrics
// line of a TP 2 run's shape, in a directory of the given filesystem.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace boostlm::bench {

struct MetricsBenchOptions {
  std::string dir = "/tmp";  // where the scratch run directories go (the run's disk matters)
  int steps = 2000;          // appends per repeat
  int repeats = 5;           // the median of the repeats' medians is reported
};

// Prints one line each for off and on and returns {"steps", "repeats", "append_us_off",
// "append_us_on", "event_us"} (medians per step, in microseconds).
nlohmann::json run_metrics_bench(const MetricsBenchOptions& options);

}  // namespace boostlm::bench
