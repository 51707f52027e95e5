// Numbers on the command line. `train` and `generate` (src/cli/train.cpp, generate.cpp) declare
// their numeric options with CLI11 as int64_t, int, uint64_t and float, checked with
// PositiveNumber and Range; this target declares options of the same types and checks and parses
// the fuzzer's bytes as the arguments (one per line). The subcommands themselves cannot be linked
// here: their callbacks pull in the whole engine (MPI, oneDNN), which the fuzz build leaves out.
#include <cmath>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  CLI::App app{"fuzz"};
  int64_t steps = 1000, top_k = 40, keep = 2, vocab_size = 0;
  int zero = 0, tp = 1;
  uint64_t seed = 1;
  float lr = 1e-3f, temperature = 0.8f;
  double seconds = 1.0;
  app.add_option("--steps", steps)->check(CLI::PositiveNumber);
  app.add_option("--tp", tp)->check(CLI::PositiveNumber);
  app.add_option("--zero", zero)->check(CLI::Range(0, 1));
  app.add_option("--top-k", top_k)->check(CLI::NonNegativeNumber);
  app.add_option("--keep", keep);
  app.add_option("--vocab-size", vocab_size);
  app.add_option("--seed", seed);
  app.add_option("--lr", lr);
  app.add_option("--temperature", temperature)->check(CLI::Range(0.0, 100.0));
  app.add_option("--seconds", seconds);
  // CLI11 reads argv backwards from a vector: the last element is the first argument.
  std::vector<std::string> args;
  const std::string_view text = text_of(data, size);
  for (size_t begin = 0; begin <= text.size();) {
    const size_t end = std::min(text.find('\n', begin), text.size());
    args.emplace_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::Error&) {
    return 0;
  }
  FUZZ_CHECK(steps > 0 && tp > 0);
  FUZZ_CHECK(zero == 0 || zero == 1);
  FUZZ_CHECK(top_k >= 0);
  FUZZ_CHECK(temperature >= 0.0f && temperature <= 100.0f);
  return 0;
}
