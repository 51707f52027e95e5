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
#include "train/trainer.h"

namespace boostlm::cli {

namespace {

struct TextEval {
  std::string text, tokenizer;
  int64_t batch_size, seq_len, batches;
};

// Loss and perplexity of raw text: tokenized as prepare tokenizes a corpus, then the first
// windows of it, shrunk to the text when it is shorter than batch_size·seq_len + 1 tokens.
void print_text_loss(Model& model, const std::string& dir, const TextEval& o) {
  std::string tokenizer_path = o.tokenizer;
  if (tokenizer_path.empty()) tokenizer_path = (std::filesystem::path(dir) / "tokenizer.model");
  if (!std::filesystem::exists(tokenizer_path))
    throw error("the checkpoint ", dir, " has no tokenizer.model; give --tokenizer");
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
  const int64_t seq_len = std::min(o.seq_len, n - 1);
  const int64_t batch_size = std::clamp<int64_t>((n - 1) / seq_len, 1, o.batch_size);
  const int64_t windows = std::min(o.batches, (n - 1) / (batch_size * seq_len));
  const double loss = evaluate_tokens(model, tokens, batch_size, seq_len, windows);
  std::printf("%s\n", nlohmann::json({{"checkpoint", dir},
                                      {"text", o.text},
                                      {"tokens", n},
                                      {"evaluated_tokens", windows * batch_size * seq_len},
                                      {"batch_size", batch_size},
                                      {"seq_len", seq_len},
                                      {"loss", loss},
                                      {"perplexity", std::exp(loss)}})
                          .dump()
                          .c_str());
}

}  // namespace

void add_eval(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "mean loss of a checkpoint over the first K windows");
  add_device_option(*cmd);
  struct Args {
    std::string checkpoint, data, text, tokenizer, precision = "fp32";
    int64_t batch_size = 8, seq_len = 256, batches = 20;
    bool allow_tokenizer_change = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--checkpoint", a->checkpoint, "checkpoint or run directory")->required();
  auto* data = cmd->add_option("--data", a->data, "token shard (train.bin / val.bin)")
                   ->check(CLI::ExistingFile);
  auto* text = cmd->add_option("--text", a->text,
                               "raw UTF-8 text instead: tokenized with the checkpoint's tokenizer "
                               "(documents are runs of non-blank lines, EOS after each, as "
                               "prepare does); prints the loss and perplexity")
                   ->check(CLI::ExistingFile);
  data->excludes(text);
  cmd->add_option("--tokenizer", a->tokenizer,
                  "with --text: sentencepiece model (default: the checkpoint's)");
  cmd->add_option("--batch-size,-b", a->batch_size, "sequences per window")->check(at_least(1));
  cmd->add_option("--seq-len,-t", a->seq_len, "tokens per sequence")->check(at_least(1));
  cmd->add_option("--batches", a->batches, "windows from token 0")->check(at_least(1));
  cmd->add_option("--precision", a->precision, "fp32 or bf16")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_flag("--allow-tokenizer-change", a->allow_tokenizer_change,
                "evaluate data (or --tokenizer) of another tokenizer than the checkpoint's (a "
                "warning instead of a refusal)");
  cmd->callback([a] {
    if (mpi_world_size() > 1) throw error("eval runs in one process; start it without mpirun");
    const std::string dir = resolve_checkpoint(a->checkpoint);
    verify_checkpoint(dir);
    Model model(read_checkpoint_config(dir), parse_dtype(a->precision));
    load_checkpoint_weights(dir, model);
    if (a->seq_len > model.config().max_seq_len)
      throw error("--seq-len ", a->seq_len,
                  " exceeds the model's max_seq_len=", model.config().max_seq_len);
    if (a->data.empty() == a->text.empty()) throw error("give --data SHARD or --text FILE");
    // The tokens must come from the checkpoint's tokenizer: the shard's directory says which
    // made it (data/prepare.h); --text is tokenized with --tokenizer when given.
    const std::string warning = check_same_tokenizer(
        checkpoint_tokenizer(dir),
        !a->data.empty() ? prepared_tokenizer(std::filesystem::path(a->data).parent_path().string())
                         : tokenizer_identity(a->tokenizer),
        a->allow_tokenizer_change,
        !a->data.empty() ? "eval --data " + a->data : "eval --tokenizer " + a->tokenizer);
    if (!warning.empty()) warn(warning);
    if (!a->data.empty()) {
      const double loss = evaluate(model, a->data, a->batch_size, a->seq_len, a->batches);
      std::printf(
          "%s\n",
          nlohmann::json(
              {{"checkpoint", dir}, {"data", a->data}, {"batches", a->batches}, {"loss", loss}})
              .dump()
              .c_str());
      return;
    }
    print_text_loss(model, dir, {a->text, a->tokenizer, a->batch_size, a->seq_len, a->batches});
  });
}

}  // namespace boostlm::cli
