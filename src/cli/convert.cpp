#include <cstdio>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/checks.h"
#include "cli/commands.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "core/file_io.h"
#include "data/tokenizer.h"
#include "engine/model.h"
#include "formats/gguf_export.h"
#include "formats/hf_export.h"
#include "formats/hf_import.h"
#include "model/lowrank_convert.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace boostlm::cli {

namespace {

namespace fs = std::filesystem;

template <class Args>
void convert_to_low_rank(Args& a) {
  if (a.checkpoint.empty()) throw error("convert --to ", a.to, ": give --checkpoint DIR (dense)");
  if (!a.ranks.empty()) parse_rank_list(a.ranks, a.low_rank);
  const std::string dir = resolve_checkpoint(a.checkpoint);
  verify_checkpoint(dir);
  Model dense(read_checkpoint_config(dir), DType::f32);
  load_checkpoint_weights(dir, dense);
  a.low_rank.arch = parse_arch(a.to);
  const LowRankResult result = to_low_rank(dense.config(), dense.weights(), a.low_rank);
  std::printf("%-40s %6s %6s %12s %12s\n", "projection", "chosen", "rank", "kept energy",
              "rel. error");
  for (const auto& r : result.report)
    std::printf("%-40s %6lld %6lld %12.6f %12.3e\n", r.name.c_str(),
                static_cast<long long>(r.chosen_rank), static_cast<long long>(r.rank),
                r.kept_energy, r.relative_error);
  for (ProjKind kind : kProjKinds) {  // a shorthand above a family's full rank: say what it got
    const int64_t asked = is_attention(kind) ? a.low_rank.attn_rank : a.low_rank.mlp_rank;
    const int64_t rank = result.config.rank(kind);
    if (a.low_rank.family_ranks[static_cast<int>(kind)] == 0 && asked > rank)
      std::printf("convert: %s: %s %lld exceeds its full rank; it keeps full rank %lld\n",
                  to_string(kind), is_attention(kind) ? "--attn-rank" : "--mlp-rank",
                  static_cast<long long>(asked), static_cast<long long>(rank));
  }
  std::printf("convert: ranks %s (%s)\n", result.config.ranks_text().c_str(), a.to.c_str());
  Model low(result.config, DType::f32);
  std::copy_n(result.weights.data(), result.weights.size(), low.weights().data());
  if (!a.data.empty()) {
    const EvalSet set =
        select_eval_windows(eval_shard_paths(a.data), a.batch_size, a.seq_len, a.eval_batches);
    const double before = evaluate(dense, set, a.batch_size, a.seq_len);
    const double after = evaluate(low, set, a.batch_size, a.seq_len);
    std::printf("convert: loss before %.6f, after %.6f (%s, %lld windows from %zu shard(s))\n",
                before, after, a.data.c_str(), static_cast<long long>(set.windows),
                set.shards.size());
  }
  const std::string tokenizer = find_tokenizer(dir);  // tokenizer.model or tokenizer.json
  while_doing("writing the checkpoint --out " + a.out,
              [&] { save_checkpoint(a.out, checkpoint_of(low, nullptr, nullptr, tokenizer)); });
  std::printf("convert: %s -> %s\n", dir.c_str(), a.out.c_str());
}

// --dtype's spellings (f32, fp32, float32 ...) as one name per type, for --to-hf or --to-gguf.
std::string canonical_dtype(const std::string& dtype, bool gguf) {
  if (dtype == "f32" || dtype == "fp32" || dtype == "float32") return gguf ? "f32" : "float32";
  if (dtype == "f16" || dtype == "fp16" || dtype == "float16") return gguf ? "f16" : "float16";
  if (dtype == "bf16" || dtype == "bfloat16") return gguf ? "bf16" : "bfloat16";
  if (dtype == "auto") return gguf ? "f32" : "auto";  // boostlm holds fp32
  if (dtype == "q8_0" && gguf) return "q8_0";
  throw error("--dtype ", dtype, ": --to-hf writes float32, bfloat16 or float16 (q8_0 is for ",
              "--to-gguf)");
}

// The converters (formats/) write a model; what they write is read here from the checkpoint, and
// everything that can be refused is refused before its weights are read.
GgufExportSummary export_checkpoint_to_gguf(const std::string& checkpoint, const std::string& out,
                                            GgufExportOptions options) {
  const std::string dir = resolve_checkpoint(checkpoint);
  verify_checkpoint(dir);
  const ModelConfig config = read_checkpoint_config(dir);
  check_gguf_exportable(config, dir);
  const std::string tokenizer = gguf_tokenizer_of(dir);
  check_gguf_out(out, options);
  const CheckpointTensors tensors(dir, config);  // read tensor by tensor as they are written
  if (options.name.empty())
    options.name = fs::absolute(checkpoint).lexically_normal().filename().string();
  if (options.name.empty())
    options.name = fs::absolute(checkpoint).lexically_normal().parent_path().filename().string();
  return export_to_gguf(tensors.tensors(), tokenizer, out, options);
}

std::string export_checkpoint_to_hf(const std::string& checkpoint, const std::string& out,
                                    const HfExportOptions& options) {
  const std::string dir = resolve_checkpoint(checkpoint);
  verify_checkpoint(dir);
  const ModelConfig config = read_checkpoint_config(dir);
  check_hf_exportable(config, options);
  nlohmann::json source_config;
  try {
    source_config = nlohmann::json::parse(read_text_file((fs::path(dir) / "config.json").string()));
  } catch (const nlohmann::json::exception&) {
  }  // read_checkpoint_config above has already named any problem
  // The dtype an imported model came in (import_hf_checkpoint), which --dtype auto writes back.
  const std::string imported = source_config.value("hf_torch_dtype", std::string("float32"));
  const CheckpointTensors tensors(dir, config);  // read tensor by tensor as they are written
  return export_to_hf(tensors.tensors(), find_tokenizer(dir), imported, out, options);
}

// A Hugging Face directory as a boostlm checkpoint (fp32), its dtype kept in config.json.
ModelConfig import_hf_checkpoint(const std::string& dir, const std::string& out) {
  const HfModel hf = read_hf_model(dir);
  CheckpointWrite w;
  w.config = &hf.config;
  w.table = &hf.table;
  w.weights = &hf.weights;
  w.tokenizer_path = hf.tokenizer;
  w.config_extra = {{"hf_torch_dtype", hf.torch_dtype}};
  save_checkpoint(out, w);
  return hf.config;
}

template <class Args>
void convert_to_gguf(const Args& a) {
  GgufExportOptions options;
  options.dtype = canonical_dtype(a.hf.dtype, true);
  const GgufExportSummary summary =
      while_doing("exporting " + a.to_gguf + " to --out " + a.out,
                  [&] { return export_checkpoint_to_gguf(a.to_gguf, a.out, options); });
  for (const std::string& note : summary.notes) std::printf("convert: %s\n", note.c_str());
  std::printf("convert: %s -> %s (GGUF v3, llama, %s, %lld tensors, %llu bytes)\n",
              a.to_gguf.c_str(), a.out.c_str(), summary.file_type.c_str(),
              static_cast<long long>(summary.tensors),
              static_cast<unsigned long long>(summary.bytes));
}

}  // namespace

void add_convert(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "convert", "import or export Hugging Face LLaMA directories; export GGUF; dense to low rank");
  struct Args {
    std::string from_hf, to_hf, to_gguf, out, to, checkpoint, data, ranks;
    HfExportOptions hf;
    LowRankOptions low_rank;
    // The same defaults as train's validation and eval (README, "Flags").
    int64_t batch_size = 8, seq_len = 256, eval_batches = 20;
  };
  auto a = std::make_shared<Args>();
  auto* from = cmd->add_option("--from-hf", a->from_hf,
                               "Hugging Face LLaMA directory to import as a boostlm checkpoint");
  auto* to = cmd->add_option("--to-hf", a->to_hf,
                             "checkpoint (or run directory) to export as a Hugging Face directory");
  auto* to_gguf = cmd->add_option(
      "--to-gguf", a->to_gguf,
      "checkpoint (or run directory) to export as a GGUF file for llama.cpp (`llama` "
      "architecture, tokenizer embedded); svd models are multiplied out (W = A·B, exact up to "
      "rounding), cola models cannot be");
  auto* to_arch = cmd->add_option("--to", a->to, "convert a dense checkpoint to low rank (SVD)")
                      ->check(CLI::IsMember({"svd", "cola"}));
  from->excludes(to)->excludes(to_gguf);
  to->excludes(to_gguf);
  to_arch->excludes(from)->excludes(to)->excludes(to_gguf);
  cmd->add_option("--checkpoint", a->checkpoint, "--to: the dense checkpoint (or run directory)");
  computed_default(
      cmd->add_option("--attn-rank", a->low_rank.attn_rank,
                      "--to: rank of q/k/v/o, each at most its full rank (or --energy)"))
      ->check(at_least(1));
  computed_default(cmd->add_option("--mlp-rank", a->low_rank.mlp_rank,
                                   "--to: rank of gate/up/down (or --energy)"))
      ->check(at_least(1));
  cmd->add_option("--rank", a->ranks,
                  "--to: ranks per projection family, e.g. q=64,k=32,v=32,o=64,gate=96,up=96,"
                  "down=96 (the families not named take --attn-rank/--mlp-rank)");
  computed_default(cmd->add_option("--energy", a->low_rank.energy,
                                   "--to: per projection family, the smallest rank keeping this "
                                   "share of every layer's Σσ² (instead of ranks)"))
      ->check(share());
  cmd->add_option("--data,-d", a->data,
                  "--to: directory from `boostlm prepare` (its val shards, in order) or token "
                  "shard to report the loss on before and after")
      ->check(CLI::ExistingPath);
  add_deprecated(*cmd, "--eval-data", "--data", a->data)->check(CLI::ExistingPath);
  cmd->add_option("--batch-size,-b", a->batch_size, "--data: sequences per window")
      ->check(at_least(1));
  cmd->add_option("--seq-len,-t", a->seq_len, "--data: tokens per sequence")->check(at_least(1));
  cmd->add_option("--eval-batches", a->eval_batches,
                  "--data: windows of -b x -t, each shard's from its token 0, shard after shard")
      ->check(at_least(1));
  add_deprecated(*cmd, "--batches", "--eval-batches", a->eval_batches)->check(at_least(1));
  cmd->add_option("--out,-o", a->out, "directory to write (--to-gguf: the .gguf file)")->required();
  cmd->add_option("--dtype", a->hf.dtype,
                  "--to-hf: tensor dtype (auto: the one the model was imported from, else "
                  "float32); --to-gguf: f32 (auto), f16, bf16 or q8_0 for the matrices (norms stay "
                  "f32)")
      ->check(CLI::IsMember({"auto", "float32", "bfloat16", "float16", "fp32", "bf16", "fp16",
                             "f32", "f16", "q8_0"}));
  cmd->add_option("--shard-size", a->hf.shard_bytes,
                  "--to-hf: bytes per safetensors shard (larger models are sharded)")
      ->check(at_least(1));
  cmd->callback([a] {
    if (mpi_world_size() > 1) throw error("convert runs in one process; start it without mpirun");
    if (!a->from_hf.empty()) {
      if (!is_hf_directory(a->from_hf))
        throw error("--from-hf ", a->from_hf, ": not a Hugging Face model directory (it needs ",
                    "config.json and model.safetensors or model.safetensors.index.json)");
      const ModelConfig config =
          while_doing("importing " + a->from_hf + " into --out " + a->out,
                      [&] { return import_hf_checkpoint(a->from_hf, a->out); });
      std::printf("convert: %s (llama, %lld layers, d=%lld) -> %s\n", a->from_hf.c_str(),
                  static_cast<long long>(config.n_layers), static_cast<long long>(config.d_model),
                  a->out.c_str());
    } else if (!a->to_gguf.empty()) {
      convert_to_gguf(*a);
    } else if (!a->to_hf.empty()) {
      a->hf.dtype = canonical_dtype(a->hf.dtype, false);
      const std::string dtype = while_doing("exporting " + a->to_hf + " to --out " + a->out, [&] {
        return export_checkpoint_to_hf(a->to_hf, a->out, a->hf);
      });
      std::printf("convert: %s -> %s (%s)\n", a->to_hf.c_str(), a->out.c_str(), dtype.c_str());
    } else if (!a->to.empty()) {
      convert_to_low_rank(*a);
    } else {
      throw error("convert: give --from-hf DIR, --to-hf CHECKPOINT, --to-gguf CHECKPOINT or --to ",
                  "svd|cola");
    }
  });
}

}  // namespace boostlm::cli
