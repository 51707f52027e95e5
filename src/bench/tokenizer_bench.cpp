#include "bench/tokenizer_bench.h"

#include <chrono>
#include <cstdio>
#include <thread>

#include "bench/timing.h"
#include "core/error.h"
#include "core/file_io.h"
#include "data/tokenizer.h"

namespace boostlm::bench {

nlohmann::json run_tokenizer_bench(const TokenizerBenchOptions& options) {
  const Tokenizer tokenizer = Tokenizer::load(options.tokenizer);
  const std::string text = read_text_file(options.text);
  std::vector<std::string_view> lines;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    end = end == std::string::npos ? text.size() : end;
    lines.push_back(std::string_view(text).substr(at, end - at));
    at = end + 1;
  }
  const int threads = std::max(1, options.threads);
  std::vector<int64_t> tokens(static_cast<size_t>(threads));
  auto pass = [&] {
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        int64_t count = 0;
        for (size_t i = static_cast<size_t>(t); i < lines.size(); i += static_cast<size_t>(threads))
          count += static_cast<int64_t>(tokenizer.encode(lines[i]).size());
        tokens[static_cast<size_t>(t)] = count;
      });
    }
    for (std::thread& worker : workers) worker.join();
  };
  pass();  // warm-up: page cache, and each thread's piece cache
  std::vector<double> seconds;
  for (int r = 0; r < std::max(1, options.repeats); ++r) {
    const auto start = std::chrono::steady_clock::now();
    pass();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  int64_t total_tokens = 0;
  for (int64_t count : tokens) total_tokens += count;
  const double median_s = median(seconds);
  const double mb_per_s = static_cast<double>(text.size()) / 1e6 / median_s;
  std::printf(
      "bench tokenizer: %s on %s (%.2f MB, %lld tokens), %d thread(s): %.2f MB/s, %.2f "
      "MB/s per thread (median of %zu)\n",
      tokenizer.path().c_str(), options.text.c_str(), static_cast<double>(text.size()) / 1e6,
      static_cast<long long>(total_tokens), threads, mb_per_s, mb_per_s / threads, seconds.size());
  return {{"tokenizer", tokenizer.path()},
          {"text", options.text},
          {"bytes", text.size()},
          {"tokens", total_tokens},
          {"threads", threads},
          {"seconds", median_s},
          {"mb_per_s", mb_per_s},
          {"mb_per_s_per_thread", mb_per_s / threads}};
}

}  // namespace boostlm::bench
