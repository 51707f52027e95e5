#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/checks.h"
#include "cli/commands.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "engine/model.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace boostlm::cli {

void add_eval(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "mean loss of a checkpoint over the first K windows");
  struct Args {
    std::string checkpoint, data, precision = "fp32";
    int64_t batch_size = 8, seq_len = 256, batches = 20;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--checkpoint", a->checkpoint, "checkpoint or run directory")->required();
  cmd->add_option("--data", a->data, "token shard (train.bin / val.bin)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--batch-size,-b", a->batch_size, "sequences per window")->check(at_least(1));
  cmd->add_option("--seq-len,-t", a->seq_len, "tokens per sequence")->check(at_least(1));
  cmd->add_option("--batches", a->batches, "windows from token 0")->check(at_least(1));
  cmd->add_option("--precision", a->precision, "fp32 or bf16")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->callback([a] {
    if (mpi_world_size() > 1) throw error("eval runs in one process; start it without mpirun");
    const std::string dir = resolve_checkpoint(a->checkpoint);
    verify_checkpoint(dir);
    Model model(read_checkpoint_config(dir), parse_dtype(a->precision));
    load_checkpoint_weights(dir, model);
    if (a->seq_len > model.config().max_seq_len)
      throw error("--seq-len ", a->seq_len,
                  " exceeds the model's max_seq_len=", model.config().max_seq_len);
    const double loss = evaluate(model, a->data, a->batch_size, a->seq_len, a->batches);
    std::printf(
        "%s\n",
        nlohmann::json(
            {{"checkpoint", dir}, {"data", a->data}, {"batches", a->batches}, {"loss", loss}})
            .dump()
            .c_str());
  });
}

}  // namespace boostlm::cli
