#include <cstdio>
#include <filesystem>

#include "cli/checks.h"
#include "cli/commands.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "model/generate.h"
#include "train/checkpoint.h"

namespace boostlm::cli {

void add_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "sample text from a checkpoint");
  struct Args {
    std::string checkpoint, prompt, tokenizer;
    SampleOptions sample;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--checkpoint", a->checkpoint, "checkpoint or run directory")->required();
  cmd->add_option("--prompt,-p", a->prompt, "text to continue")->required();
  cmd->add_option("--tokenizer", a->tokenizer, "sentencepiece model (default: the checkpoint's)");
  cmd->add_option("--max-tokens,-n", a->sample.max_new_tokens, "tokens to generate")
      ->check(at_least(1));
  cmd->add_option("--temperature", a->sample.temperature, "sampling temperature (0: greedy)")
      ->check(non_negative());
  cmd->add_option("--top-k", a->sample.top_k, "sample among the k most likely (0: all)")
      ->check(at_least(0));
  cmd->add_option("--seed", a->sample.seed, "sampling seed");
  cmd->callback([a] {
    if (mpi_world_size() > 1) throw error("generate runs in one process; start it without mpirun");
    const std::string dir = resolve_checkpoint(a->checkpoint);
    verify_checkpoint(dir);
    std::string tok_path = a->tokenizer;
    if (tok_path.empty()) tok_path = (std::filesystem::path(dir) / "tokenizer.model").string();
    if (!std::filesystem::exists(tok_path))
      throw error("the checkpoint has no tokenizer.model; pass --tokenizer");
    const Tokenizer tokenizer = Tokenizer::load(tok_path);
    Model model(read_checkpoint_config(dir), DType::f32);
    if (tokenizer.vocab_size() > model.config().vocab_size)
      throw error("the tokenizer has ", tokenizer.vocab_size(), " tokens, more than the model's ",
                  model.config().vocab_size);
    load_checkpoint_weights(dir, model);
    std::vector<int32_t> prompt = tokenizer.encode(a->prompt);
    if (prompt.empty()) throw error("--prompt encodes to no tokens");
    a->sample.stop_token = tokenizer.eos_id();
    const std::vector<int32_t> out = generate(model, prompt, a->sample);
    std::printf("%s%s\n", a->prompt.c_str(), tokenizer.decode(out).c_str());
  });
}

}  // namespace boostlm::cli
