// `boostlm bench tokenizer`: encoding throughput of a tokenizer (SentencePiece .model or
// tokenizer.json) on a text file's lines, in MB/s of UTF-8 per thread; scripts/bench_tokenizers.sh
// sets it beside the npm references (tiktoken, transformers.js) on the same text.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace boostlm::bench {

struct TokenizerBenchOptions {
  std::string tokenizer;  // a .model, a tokenizer.json or a directory holding one
  std::string text;       // encoded line by line, as prepare's documents are
  int repeats = 5;        // timed passes after one warm-up pass; the median is reported
  int threads = 1;        // each encodes its share of the lines
};

// Prints one line and returns {"tokenizer", "bytes", "tokens", "threads", "seconds",
// "mb_per_s", "mb_per_s_per_thread"}.
nlohmann::json run_tokenizer_bench(const TokenizerBenchOptions& options);

}  // namespace boostlm::bench
