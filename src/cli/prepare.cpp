#include <cstdio>

#include "cli/commands.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "core/file_io.h"
#include "data/prepare.h"

namespace boostlm::cli {

int& exit_code() {
  static int code = 0;
  return code;
}

void add_prepare(CLI::App& app) {
  auto* cmd = app.add_subcommand("prepare", "tokenize text files into train/val token shards");
  auto options = std::make_shared<PrepareOptions>();
  cmd->add_option("inputs", options->input_files, "UTF-8 text files")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--out,-o", options->output_dir, "output directory")->required();
  cmd->add_option("--vocab-size", options->vocab_size, "vocabulary of a trained tokenizer")
      ->check(CLI::Range(256, 1 << 20));
  cmd->add_option("--tokenizer", options->tokenizer_path,
                  "use this sentencepiece model instead of training one")
      ->check(CLI::ExistingFile);
  cmd->add_option("--val-fraction", options->val_fraction, "fraction of documents held out")
      ->check(CLI::Range(0.0, 0.5));
  cmd->add_option("--seed", options->seed, "split and tokenizer-sample seed");
  cmd->callback([options] {
    if (mpi_world_size() > 1) throw error("prepare runs in one process; start it without mpirun");
    const PrepareSummary s = while_doing("preparing the corpus into --out " + options->output_dir,
                                         [&] { return prepare_corpus(*options); });
    std::printf("prepare: %s tokenizer (vocab %ld) %s\n",
                s.trained_tokenizer ? "trained" : "copied", s.vocab_size, s.tokenizer_path.c_str());
    std::printf("prepare: train %ld documents, %ld tokens -> %s\n", s.train_documents,
                s.train_tokens, s.train_path.c_str());
    if (!s.val_path.empty())
      std::printf("prepare: val %ld documents, %ld tokens -> %s\n", s.val_documents, s.val_tokens,
                  s.val_path.c_str());
    std::printf("prepare: %.1f s tokenizer, %.1f s encoding\n", s.tokenizer_seconds,
                s.encode_seconds);
  });
}

}  // namespace boostlm::cli
