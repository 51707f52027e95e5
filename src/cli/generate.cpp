#include <cstdio>
#include <filesystem>

#include "cli/checks.h"
#include "cli/commands.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "engine/generate.h"
#include "train/checkpoint.h"

namespace boostlm::cli {

namespace {

// "2 threads", or "2 threads, 1 while other work held the cores" (core/threads.h).
std::string threads_used(const GenerateStats& stats) {
  std::string text = std::to_string(stats.threads) + (stats.threads == 1 ? " thread" : " threads");
  if (stats.fewest_threads < stats.threads)
    text += ", " + std::to_string(stats.fewest_threads) + " while other work held the cores";
  return text;
}

}  // namespace

void add_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "sample text from a checkpoint");
  add_device_option(*cmd);
  struct Args {
    std::string checkpoint, prompt, tokenizer;
    SampleOptions sample;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--checkpoint", a->checkpoint, "checkpoint or run directory")->required();
  cmd->add_option("--prompt,-p", a->prompt, "text to continue")->required();
  cmd->add_option("--tokenizer", a->tokenizer,
                  "sentencepiece .model or tokenizer.json (default: the checkpoint's)");
  cmd->add_option("--max-new-tokens", a->sample.max_new_tokens, "tokens to generate")
      ->check(at_least(1));
  // -n is the number of ranks in launch: one letter, one meaning (README, "Flags").
  add_deprecated(*cmd, "-n", "--max-new-tokens", a->sample.max_new_tokens)->check(at_least(1));
  add_deprecated(*cmd, "--max-tokens", "--max-new-tokens", a->sample.max_new_tokens)
      ->check(at_least(1));
  cmd->add_option("--temperature", a->sample.temperature, "sampling temperature (0: greedy)")
      ->check(non_negative());
  cmd->add_option("--top-k", a->sample.top_k, "sample among the k most likely (0: all)")
      ->check(at_least(0));
  cmd->add_option("--top-p", a->sample.top_p,
                  "sample among the most likely tokens holding this much probability (1: all)")
      ->check(share());
  cmd->add_option("--seed", a->sample.seed, "sampling seed");
  auto no_cache = std::make_shared<bool>(false);
  cmd->add_flag("--no-cache", *no_cache,
                "rerun the whole context for every token (no KV cache; the reference)");
  cmd->callback([a, no_cache] {
    a->sample.kv_cache = !*no_cache;
    if (mpi_world_size() > 1) throw error("generate runs in one process; start it without mpirun");
    const std::string dir = resolve_checkpoint(a->checkpoint);
    verify_checkpoint(dir);
    std::string tok_path = a->tokenizer;
    if (tok_path.empty()) tok_path = find_tokenizer(dir);
    if (tok_path.empty() || !std::filesystem::exists(tok_path))
      throw error("the checkpoint has no tokenizer.model or tokenizer.json; pass --tokenizer");
    const Tokenizer tokenizer = Tokenizer::load(tok_path);
    Model model(read_checkpoint_config(dir), DType::f32);
    if (tokenizer.vocab_size() > model.config().vocab_size)
      throw error("the tokenizer has ", tokenizer.vocab_size(), " tokens, more than the model's ",
                  model.config().vocab_size);
    load_checkpoint_weights(dir, model);
    std::vector<int32_t> prompt = tokenizer.encode(a->prompt);
    if (prompt.empty()) throw error("--prompt encodes to no tokens");
    a->sample.stop_token = tokenizer.eos_id();
    a->sample.vocab_limit = tokenizer.vocab_size();  // a padded vocabulary's extra ids have no text
    // Tokens are printed as they come: the decoded text so far, less what is already printed
    // (a token's text can depend on its neighbours, e.g. sentencepiece's leading spaces).
    std::printf("%s", a->prompt.c_str());
    std::fflush(stdout);
    // Decoded with the prompt before them, so the first token keeps its leading space.
    std::vector<int32_t> out = prompt;
    std::string printed = tokenizer.decode(prompt);
    auto show = [&](int32_t token) {
      out.push_back(token);
      const std::string text = tokenizer.decode(out);
      if (text.compare(0, printed.size(), printed) != 0) return;  // wait for it to settle
      std::fputs(text.c_str() + printed.size(), stdout);
      std::fflush(stdout);
      printed = text;
    };
    GenerateStats stats;
    generate(model, prompt, a->sample, show, &stats);
    const std::string text = tokenizer.decode(out);
    if (text.compare(0, printed.size(), printed) == 0)
      std::fputs(text.c_str() + printed.size(), stdout);
    std::printf("\n");
    std::fflush(stdout);  // the text ends before the statistics on stderr begin
    const int64_t later = stats.new_tokens - 1;
    std::fprintf(stderr,
                 "generate: %lld prompt tokens in %.3f s (with the first new token); %lld more "
                 "tokens at %.1f tokens/s (%s, %s)\n",
                 static_cast<long long>(stats.prompt_tokens), stats.prefill_s,
                 static_cast<long long>(later), later > 0 ? later / stats.decode_s : 0.0,
                 a->sample.kv_cache ? "KV cache" : "no cache", threads_used(stats).c_str());
  });
}

}  // namespace boostlm::cli
