#include <cstdio>

#include "cli/checks.h"
#include "cli/commands.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "core/file_io.h"
#include "engine/model.h"
#include "train/checkpoint.h"

namespace boostlm::cli {

void add_init(CLI::App& app) {
  auto* cmd = app.add_subcommand("init", "write a freshly initialised checkpoint");
  struct Args {
    std::string config, out, tokenizer;
    uint64_t seed = 1234;
    int64_t vocab_size = 0;  // 0: the preset's
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--config,-c", a->config,
                  "model config: a file, or a preset of configs/ by name (tiny-cola, 60m-dense)")
      ->required()
      ->transform(model_config());
  computed_default(
      cmd->add_option("--vocab-size", a->vocab_size, "vocabulary size (default: the config's)"))
      ->check(at_least(1));
  cmd->add_option("--seed", a->seed, "initialisation seed");
  cmd->add_option("--out,-o", a->out, "checkpoint directory to write")->required();
  cmd->add_option("--tokenizer", a->tokenizer,
                  "tokenizer to include: a sentencepiece .model or a tokenizer.json")
      ->check(CLI::ExistingFile);
  cmd->callback([a] {
    if (mpi_world_size() > 1) throw error("init runs in one process; start it without mpirun");
    ModelConfig config = ModelConfig::load(a->config);
    if (a->vocab_size > 0) {
      config.vocab_size = a->vocab_size;
      config.validate();
    }
    Model model(config, DType::f32);
    model.init_weights(a->seed);
    while_doing("writing the checkpoint --out " + a->out, [&] {
      save_checkpoint(a->out, checkpoint_of(model, nullptr, nullptr, a->tokenizer));
    });
    std::printf("init: %.2fM parameters -> %s\n", model.params().parameter_count() / 1e6,
                a->out.c_str());
  });
}

}  // namespace boostlm::cli
