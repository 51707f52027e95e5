#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/checks.h"
#include "cli/commands.h"
#include "comm/mpi_runtime.h"
#include "train/trainer.h"

namespace boostlm::cli {

void add_train(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "train a model on prepared token shards");
  add_device_option(*cmd);
  auto o = std::make_shared<TrainOptions>();
  auto precision = std::make_shared<std::string>("fp32");
  auto layout = std::make_shared<std::string>();
  auto rmsnorm = std::make_shared<std::string>("online");
  auto grouping = std::make_shared<std::string>("on");
  auto recompute = std::make_shared<std::string>("none");
  auto overlap = std::make_shared<std::string>("auto");
  auto residual = std::make_shared<std::string>();
  cmd->add_option("--config,-c", o->config_path,
                  "model config: a file, or a preset of configs/ by name (tiny-cola, 60m-dense)")
      ->transform(model_config());
  cmd->add_option("--data,-d", o->data_dir,
                  "directory from `boostlm prepare` (its train shards; validation reads its val "
                  "shards), its meta.json, or one token shard (no validation)")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("--out,-o", o->out_dir, "run directory (metrics.jsonl, checkpoints/)")
      ->required();
  cmd->add_option("--resume", o->resume, "continue a run from a checkpoint or run directory");
  cmd->add_option("--init-from", o->init_from,
                  "start from a checkpoint's weights, fresh optimizer");
  cmd->add_flag("--overwrite", o->overwrite,
                "replace an earlier run in --out (deletes its metrics and checkpoints)");
  cmd->add_flag("--allow-tokenizer-change", o->allow_tokenizer_change,
                "with --resume/--init-from: train on data of another tokenizer than the "
                "checkpoint's (a warning instead of a refusal)");
  computed_default(
      cmd->add_option("--vocab-size", o->vocab_size, "vocabulary size (default: the config's)"))
      ->check(at_least(1));
  cmd->add_option("--lax-gate", o->lax_gate,
                  "arch lax: the gate between blocks' latents, kron (Kronecker-factored, the "
                  "default) or linear (a full r x r map); default: the config's lax_gate")
      ->check(CLI::IsMember({"kron", "linear"}));
  cmd->add_option("--lax-latent-act", o->lax_latent_act,
                  "arch lax: on (σ = SiLU after the latent's norm) or off (the ablation without "
                  "σ); default: the config's lax_latent_act")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--tp", o->grid.tp, "tensor-parallel size")->check(at_least(1));
  cmd->add_option("--pp", o->grid.pp, "pipeline-parallel size")->check(at_least(1));
  cmd->add_option("--dp", o->grid.dp, "data-parallel size")->check(at_least(1));
  cmd->add_option("--layout", *layout,
                  "dense-tp, naive-tp or btp (default: dense-tp for dense "
                  "models, btp for low-rank)")
      ->check(CLI::IsMember(layout_names()));
  cmd->add_option("--rmsnorm", *rmsnorm, "btp: online (SPEC 3.4) or sync (separate all-reduce)")
      ->check(CLI::IsMember({"online", "sync"}));
  cmd->add_option("--grouping", *grouping, "share GEMMs/collectives across q|k|v, gate|up")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--recompute", *recompute,
                  "none, lowrank (btp: recompute from latents, no "
                  "communication) or block (rerun whole blocks)")
      ->check(CLI::IsMember({"none", "lowrank", "block"}));
  cmd->add_option("--tp-overlap", *overlap,
                  "hide TP collectives behind another chunk's compute: on, off, or auto (on when "
                  "the TP group spans hosts)")
      ->check(CLI::IsMember({"on", "off", "auto"}));
  cmd->add_option("--tp-overlap-chunks", o->tp_overlap_chunks,
                  "chunks of whole sequences per micro-batch with --tp-overlap (a divisor of -b "
                  "is used)")
      ->check(at_least(2));
  cmd->add_option("--zero", o->zero, "1: ZeRO stage 1, optimizer state sharded over DP")
      ->check(CLI::Range(0, 1));
  cmd->add_option("--bucket-mb", o->bucket_mb, "DP gradient all-reduce bucket (MiB)")
      ->check(at_least(1));
  cmd->add_option("--batch-size,-b", o->batch_size, "sequences per micro-batch and DP rank")
      ->check(at_least(1));
  cmd->add_option("--seq-len,-t", o->seq_len, "tokens per sequence")->check(at_least(1));
  cmd->add_option("--steps", o->steps, "total optimizer steps")->check(at_least(1));
  cmd->add_option("--schedule-steps", o->schedule_steps,
                  "length of the learning-rate schedule (0: --steps; saved, kept on --resume)")
      ->check(at_least(0));
  cmd->add_option("--grad-accum", o->grad_accum, "micro-batches per step")->check(at_least(1));
  cmd->add_option("--lr", o->schedule.max_lr, "peak learning rate")->check(positive());
  cmd->add_option("--min-lr", o->schedule.min_lr, "final learning rate of the cosine schedule")
      ->check(non_negative());
  cmd->add_option("--warmup", o->schedule.warmup_steps, "linear warm-up steps")->check(at_least(0));
  cmd->add_option("--schedule", o->schedule.kind, "cosine or constant")
      ->check(CLI::IsMember({"cosine", "constant"}));
  cmd->add_option("--weight-decay", o->optimizer.weight_decay, "AdamW decoupled weight decay")
      ->check(non_negative());
  cmd->add_option("--grad-clip", o->optimizer.grad_clip, "clip the global grad norm (0: off)")
      ->check(non_negative());
  cmd->add_option("--beta1", o->optimizer.beta1, "AdamW beta1")->check(number_in(0, 1, false));
  cmd->add_option("--beta2", o->optimizer.beta2, "AdamW beta2")->check(number_in(0, 1, false));
  cmd->add_option("--adam-eps", o->optimizer.eps, "AdamW epsilon")->check(positive());
  cmd->add_option("--precision", *precision, "fp32 or bf16")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--residual-dtype", *residual,
                  "bf16 training's residual stream between blocks: bf16 (default) or fp32 (the "
                  "ablation, as Megatron's --fp32-residual-connection); fp32 training keeps fp32")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--seed", o->seed, "initialisation and shuffling seed");
  cmd->add_flag("--shuffle", o->shuffle, "shuffle windows per epoch");
  cmd->add_option("--eval-interval", o->eval_interval, "steps between validations (0: end only)")
      ->check(at_least(0));
  cmd->add_option("--eval-batches", o->eval_batches,
                  "validation windows of -b x -t: each val shard's from its token 0, shard after "
                  "shard")
      ->check(at_least(1));
  cmd->add_option("--save-interval", o->save_interval, "steps between checkpoints (0: end only)")
      ->check(at_least(0));
  cmd->add_option("--keep", o->keep_checkpoints, "checkpoints kept")->check(at_least(1));
  auto async_save = std::make_shared<std::string>("on");
  cmd->add_option("--async-save", *async_save,
                  "write checkpoints in the background (on): training waits only while each "
                  "rank copies its shard; off waits for the files")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--save-timeout", o->save_timeout_s,
                  "end the job when a checkpoint is not written by every rank this many seconds "
                  "after it began (a stuck disk); 0: wait forever")
      ->default_val(kDefaultSaveTimeoutS)
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--log-interval", o->log_interval, "steps between log lines (non-terminal)")
      ->check(at_least(1));
  auto tensorboard = std::make_shared<std::string>("on");
  cmd->add_option("--tensorboard", *tensorboard,
                  "on: rank 0 writes metrics.jsonl's scalars to a TensorBoard event file in --out "
                  "(events.out.tfevents.*), a new one each start of the run; off: none")
      ->check(CLI::IsMember({"on", "off"}));
  add_comm_timeout(*cmd);
  cmd->callback([cmd, o, precision, layout, rmsnorm, grouping, recompute, overlap, async_save,
                 tensorboard, residual] {
    // What the user typed, as opposed to a default: on --resume it overrides the checkpoint's.
    for (const CLI::Option* option : cmd->get_options())
      if (option->count() > 0 && !option->get_lnames().empty())
        o->given.insert("--" + option->get_lnames().front());
    o->block = {*rmsnorm == "online", *grouping == "on", parse_recompute(*recompute)};
    if (!residual->empty()) o->block.residual = parse_dtype(*residual);
    o->tp_overlap = parse_overlap_mode(*overlap);
    o->async_save = *async_save == "on";
    o->tensorboard = *tensorboard == "on";
    o->precision = parse_dtype(*precision);
    if (!layout->empty()) o->layout = parse_layout(*layout);
    const TrainResult r = train(*o);
    nlohmann::json summary = {{"steps", r.steps_done},
                              {"train_loss", r.last_loss},
                              {"seconds", r.seconds},
                              {"tokens", r.tokens},
                              {"step_seconds", r.step_seconds},
                              {"tokens_per_s", r.tokens_per_s},
                              {"mfu", r.mfu},
                              {"checkpoints_written", r.checkpoints_written},
                              {"peak_rss_mb", r.peak_rss_mb},
                              {"checkpoint", r.checkpoint},
                              {"interrupted", r.interrupted},
                              {"diverged", r.diverged}};
    if (r.val_loss >= 0) summary["val_loss"] = r.val_loss;
    if (mpi_world_rank() == 0) std::printf("%s\n", summary.dump().c_str());
    if (r.diverged) exit_code() = 3;
    if (r.interrupted) exit_code() = kInterruptedExitCode;
  });
}

}  // namespace boostlm::cli
