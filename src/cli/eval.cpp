#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "cli/checks.h"
#include "cli/commands.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "core/file_io.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "engine/model.h"
#include "train/checkpoint.h"
#include "train/token_log_probs.h"
#include "train/trainer.h"

namespace boostlm::cli {

namespace {

struct TextEval {
  std::string text, tokenizer;
  int64_t batch_size, seq_len, stride;
  bool per_token;
};

// Loss and perplexity of raw text: tokenized as prepare tokenizes a corpus, then every token
// after the first scored once, in sliding windows (train/trainer.h, evaluate_every_token).
void print_text_loss(Model& model, const std::string& dir, const TextEval& o) {
  std::string tokenizer_path = o.tokenizer;
  if (tokenizer_path.empty()) tokenizer_path = find_tokenizer(dir);
  if (tokenizer_path.empty() || !std::filesystem::exists(tokenizer_path))
    throw error("the checkpoint ", dir,
                " has no tokenizer.model or tokenizer.json; give --tokenizer");
  const Tokenizer tokenizer = Tokenizer::load(tokenizer_path);
  std::vector<int32_t> tokens;
  for (const std::string& document : split_documents(read_text_file(o.text))) {
    const std::vector<int32_t> ids = tokenizer.encode(document);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    tokens.push_back(tokenizer.eos_id());
  }
  check_tokens_below(tokens, model.config().vocab_size, o.text);
  const auto n = static_cast<int64_t>(tokens.size());
  if (n < 2) throw error(o.text, " holds ", n, " token(s): at least 2 are needed for one target");
  const TokenScore score = evaluate_every_token(model, tokens, o.batch_size, o.seq_len, o.stride);
  nlohmann::json out = {{"checkpoint", dir},
                        {"text", o.text},
                        {"tokens", n},
                        {"evaluated_tokens", score.tokens},
                        {"sequences", score.sequences},
                        {"batch_size", o.batch_size},
                        {"seq_len", o.seq_len},
                        {"stride", std::min(o.stride, o.seq_len)},
                        {"loss", score.loss},
                        {"perplexity", std::exp(score.loss)}};
  if (o.per_token) {
    out["token_ids"] = tokens;
    out["log_probs"] = token_log_probs(model, tokens, o.seq_len);
  }
  std::printf("%s\n", out.dump().c_str());
}

}  // namespace

void add_eval(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "mean loss of a checkpoint on token shards or raw text");
  add_device_option(*cmd);
  struct Args {
    std::string checkpoint, data, text, tokenizer, precision = "fp32";
    int64_t batch_size = 8, seq_len = 256, eval_batches = 20, stride = 0;
    bool allow_tokenizer_change = false, per_token = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--checkpoint", a->checkpoint, "checkpoint or run directory")->required();
  auto* data = cmd->add_option("--data,-d", a->data,
                               "directory from `boostlm prepare` (its val shards, in order) "
                               "or a token shard")
                   ->check(CLI::ExistingPath);
  auto* text = cmd->add_option("--text", a->text,
                               "raw UTF-8 text instead: tokenized with the checkpoint's tokenizer "
                               "(documents are runs of non-blank lines, EOS after each, as "
                               "prepare does); every token is scored, in consecutive sequences "
                               "of -t; prints the loss, perplexity and tokens scored")
                   ->check(CLI::ExistingFile);
  data->excludes(text);
  cmd->add_option(
      "--tokenizer", a->tokenizer,
      "with --text: sentencepiece .model or tokenizer.json (default: the checkpoint's)");
  cmd->add_option("--batch-size,-b", a->batch_size, "sequences per window")->check(at_least(1));
  cmd->add_option("--seq-len,-t", a->seq_len, "tokens per sequence")->check(at_least(1));
  computed_default(cmd->add_option(
                       "--stride", a->stride,
                       "--text: the windows of -t tokens advance by this many, each scoring only "
                       "the tokens no earlier one did, with the rest as context (default: half of "
                       "-t; -t itself: consecutive windows, batched)"))
      ->check(at_least(1));
  auto* batches = cmd->add_option("--eval-batches", a->eval_batches,
                                  "--data: windows of -b x -t, each shard's from its token 0, "
                                  "shard after shard (fewer when they hold fewer, with a "
                                  "warning)")
                      ->check(at_least(1));
  auto* batches_alias =
      add_deprecated(*cmd, "--batches", "--eval-batches", a->eval_batches)->check(at_least(1));
  cmd->add_option("--precision", a->precision, "fp32 or bf16")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  auto* per_token =
      cmd->add_flag("--per-token", a->per_token,
                    "--text: also print the token ids and every target's log-probability "
                    "(token_ids, log_probs), in consecutive windows of -t (--stride -t)");
  cmd->add_flag("--allow-tokenizer-change", a->allow_tokenizer_change,
                "evaluate data (or --tokenizer) of another tokenizer than the checkpoint's (a "
                "warning instead of a refusal)");
  cmd->callback([a, batches, batches_alias, per_token] {
    if (mpi_world_size() > 1) throw error("eval runs in one process; start it without mpirun");
    if (a->data.empty() == a->text.empty()) throw error("give --data DIR|SHARD or --text FILE");
    if (per_token->count() > 0 && a->text.empty()) throw error("--per-token needs --text FILE");
    if (a->per_token && a->precision != "fp32")
      throw error("--per-token scores in fp32 (the KV decoder); drop --precision ", a->precision);
    const std::string dir = resolve_checkpoint(a->checkpoint);
    verify_checkpoint(dir);
    Model model(read_checkpoint_config(dir), parse_dtype(a->precision));
    load_checkpoint_weights(dir, model);
    if (a->seq_len > model.config().max_seq_len)
      throw error("--seq-len ", a->seq_len,
                  " exceeds the model's max_seq_len=", model.config().max_seq_len);
    // The tokens must come from the checkpoint's tokenizer: the shard's directory says which
    // made it (data/prepare.h); --text is tokenized with --tokenizer when given.
    const std::vector<std::string> shards =
        a->data.empty() ? std::vector<std::string>() : eval_shard_paths(a->data);
    const std::string warning = check_same_tokenizer(
        checkpoint_tokenizer(dir),
        !a->data.empty()
            ? prepared_tokenizer(std::filesystem::path(shards.front()).parent_path().string())
            : tokenizer_identity(a->tokenizer),
        a->allow_tokenizer_change,
        !a->data.empty() ? "eval --data " + a->data : "eval --tokenizer " + a->tokenizer);
    if (!warning.empty()) warn(warning);
    if (!a->data.empty()) {
      const EvalSet set = select_eval_windows(shards, a->batch_size, a->seq_len, a->eval_batches);
      const double loss = evaluate(model, set, a->batch_size, a->seq_len);
      std::printf("%s\n",
                  nlohmann::json({{"checkpoint", dir},
                                  {"data", a->data},
                                  {"shards", set.shards},
                                  {"batches", set.windows},
                                  {"evaluated_tokens", set.windows * a->batch_size * a->seq_len},
                                  {"loss", loss}})
                      .dump()
                      .c_str());
      return;
    }
    if (batches->count() + batches_alias->count() > 0)
      warn("eval --text scores every token of the text; --eval-batches is ignored");
    if (a->stride > a->seq_len)
      throw error("--stride ", a->stride, " is more than -t ", a->seq_len,
                  ": the windows would skip the tokens between them; give at most -t (-t itself: "
                  "consecutive windows)");
    if (a->per_token && a->stride > 0 && a->stride < a->seq_len)
      throw error("--per-token scores consecutive windows of -t; drop --stride or give --stride ",
                  a->seq_len);
    const int64_t stride = a->per_token    ? a->seq_len
                           : a->stride > 0 ? a->stride
                                           : std::max<int64_t>(1, a->seq_len / 2);
    print_text_loss(model, dir,
                    {a->text, a->tokenizer, a->batch_size, a->seq_len, stride, a->per_token});
  });
}

}  // namespace boostlm::cli
