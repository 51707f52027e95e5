#include <cstdio>

#include "cli/checks.h"
#include "cli/commands.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "train/hf_export.h"
#include "train/hf_import.h"

namespace boostlm::cli {

void add_convert(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "convert", "import a Hugging Face LLaMA directory, or export a checkpoint as one");
  struct Args {
    std::string from_hf, to_hf, out;
    HfExportOptions hf;
  };
  auto a = std::make_shared<Args>();
  auto* from = cmd->add_option("--from-hf", a->from_hf,
                               "Hugging Face LLaMA directory to import as a boostlm checkpoint");
  auto* to = cmd->add_option("--to-hf", a->to_hf,
                             "checkpoint (or run directory) to export as a Hugging Face directory");
  from->excludes(to);
  cmd->add_option("--out,-o", a->out, "directory to write")->required();
  cmd->add_option("--dtype", a->hf.dtype,
                  "--to-hf: tensor dtype (auto: the one the model was imported from, else float32)")
      ->check(CLI::IsMember({"auto", "float32", "bfloat16", "float16", "fp32", "bf16", "fp16"}));
  cmd->add_option("--shard-size", a->hf.shard_bytes,
                  "--to-hf: bytes per safetensors shard (larger models are sharded)")
      ->check(at_least(1));
  cmd->callback([a] {
    if (mpi_world_size() > 1) throw error("convert runs in one process; start it without mpirun");
    if (!a->from_hf.empty()) {
      if (!is_hf_directory(a->from_hf))
        throw error("--from-hf ", a->from_hf, ": not a Hugging Face model directory (it needs ",
                    "config.json and model.safetensors or model.safetensors.index.json)");
      const ModelConfig config = convert_from_hf(a->from_hf, a->out);
      std::printf("convert: %s (llama, %lld layers, d=%lld) -> %s\n", a->from_hf.c_str(),
                  static_cast<long long>(config.n_layers), static_cast<long long>(config.d_model),
                  a->out.c_str());
    } else if (!a->to_hf.empty()) {
      const std::string dtype = export_to_hf(a->to_hf, a->out, a->hf);
      std::printf("convert: %s -> %s (%s)\n", a->to_hf.c_str(), a->out.c_str(), dtype.c_str());
    } else {
      throw error("convert: give --from-hf DIR or --to-hf CHECKPOINT");
    }
  });
}

}  // namespace boostlm::cli
