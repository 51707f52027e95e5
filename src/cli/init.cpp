#include <cstdio>

#include "cli/commands.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "engine/model.h"
#include "train/checkpoint.h"

namespace boostlm::cli {

void add_init(CLI::App& app) {
  auto* cmd = app.add_subcommand("init", "write a freshly initialised checkpoint");
  struct Args {
    std::string config, out, tokenizer;
    uint64_t seed = 1234;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--config,-c", a->config, "model preset")->required()->check(CLI::ExistingFile);
  cmd->add_option("--seed", a->seed, "initialisation seed");
  cmd->add_option("--out,-o", a->out, "checkpoint directory to write")->required();
  cmd->add_option("--tokenizer", a->tokenizer, "sentencepiece model to include")
      ->check(CLI::ExistingFile);
  cmd->callback([a] {
    if (mpi_world_size() > 1) throw error("init runs in one process; start it without mpirun");
    Model model(ModelConfig::load(a->config), DType::f32);
    model.init_weights(a->seed);
    save_checkpoint(a->out, checkpoint_of(model, nullptr, nullptr, a->tokenizer));
    std::printf("init: %.2fM parameters -> %s\n", model.params().parameter_count() / 1e6,
                a->out.c_str());
  });
}

}  // namespace boostlm::cli
