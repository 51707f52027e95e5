#include <unistd.h>

#include <cstdio>
#include <map>
#include <thread>

#include "cli/checks.h"
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

namespace {

void print_summary(const PrepareSummary& s) {
  std::printf("prepare: %s tokenizer (vocab %ld) %s\n", s.trained_tokenizer ? "trained" : "copied",
              s.vocab_size, s.tokenizer_path.c_str());
  for (const PrepareFileSummary& f : s.files)
    std::printf(
        "prepare: input %s (%s, %s, %ld bytes, %ld decompressed): %ld documents, %ld tokens, %ld "
        "skipped%s\n",
        f.path.c_str(), f.format.empty() ? "-" : f.format.c_str(),
        f.compression.empty() ? "-" : f.compression.c_str(), f.bytes, f.decompressed_bytes,
        f.documents, f.tokens, f.skipped_records, f.missing ? " (missing)" : "");
  for (const PrepareShardSummary& shard : s.shards)
    std::printf("prepare: shard %s %ld tokens (checksum %s)\n", shard.name.c_str(), shard.tokens,
                shard.checksum.c_str());
  std::printf("prepare: train %ld documents, %ld tokens\n", s.train_documents, s.train_tokens);
  std::printf("prepare: val %ld documents, %ld tokens\n", s.val_documents, s.val_tokens);
  if (s.skipped_records > 0) std::printf("prepare: skipped %ld bad records\n", s.skipped_records);
  const double mb = static_cast<double>(s.decompressed_bytes) / 1e6;
  const double seconds = std::max(1e-9, s.total_seconds - s.tokenizer_seconds);
  std::printf(
      "prepare: %.1f MB of text in %.1f s (%.1f MB/s), %.1f s of CPU (%.2f cores)%s: tokenizer "
      "%.1f s; read %.1f s, decompress %.1f s, cut records %.1f s (reader); parse %.1f s, "
      "tokenize %.1f s (summed over threads); write %.1f s\n",
      mb, s.total_seconds, mb / seconds, s.cpu_seconds, s.cpu_seconds / std::max(1e-9, s.total_seconds),
      s.resumed ? " (resumed)" : "", s.tokenizer_seconds, s.read_seconds, s.decompress_seconds,
      s.cut_seconds, s.parse_seconds, s.encode_seconds, s.write_seconds);
}

}  // namespace

void add_prepare(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "prepare", "tokenize text or JSONL files (plain, gzip or zstd) into train/val token shards");
  auto options = std::make_shared<PrepareOptions>();
  options->threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cmd->add_option("inputs", options->input_files,
                  "files, directories or glob patterns: UTF-8 text, or .jsonl/.json/.ndjson; "
                  "each may be gzip or zstd compressed")
      ->required();
  cmd->add_option("--out,-o", options->output_dir, "output directory")->required();
  cmd->add_option("--vocab-size", options->vocab_size, "vocabulary of a trained tokenizer")
      ->check(CLI::Range(256, 1 << 20));
  cmd->add_option("--tokenizer", options->tokenizer_path,
                  "use this tokenizer instead of training a SentencePiece model")
      ->check(CLI::ExistingFile);
  cmd->add_option("--val-fraction", options->val_fraction,
                  "expected fraction of documents held out (by a seeded hash of each)")
      ->check(CLI::Range(0.0, 0.5));
  cmd->add_option("--seed", options->seed, "split hash and tokenizer-sample seed");
  cmd->add_option("--text-field", options->text_field, "JSONL: the field holding the text")
      ->capture_default_str();
  // Words on the command line, mapped in the callback (a CLI11 transformer would print its map,
  // "{auto->0,...} OR {0,2,1}", in --help).
  auto format = std::make_shared<std::string>("auto");
  cmd->add_option("--format", *format,
                  "auto (a .jsonl/.json/.ndjson name, else the first non-blank line decides), "
                  "text or jsonl")
      ->check(CLI::IsMember({"auto", "text", "jsonl"}, CLI::ignore_case))
      ->capture_default_str();
  auto on_bad_record = std::make_shared<std::string>("error");
  cmd->add_option("--on-bad-record", *on_bad_record,
                  "a malformed line, a missing or empty field, a truncated compressed file or a "
                  "vanished input: error (stop) or skip (count it and go on)")
      ->check(CLI::IsMember({"error", "skip"}, CLI::ignore_case))
      ->capture_default_str();
  // The default is this machine's cores, known only when the command runs: the help says so
  // instead of printing one machine's count (which would also make docs/cli.md machine-bound).
  computed_default(
      cmd->add_option("--threads", options->threads, "encoding threads (default: the cores)"))
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--shard-tokens", options->shard_tokens, "tokens per output shard")
      ->check(CLI::Range(int64_t{1}, int64_t{2147483647}))
      ->capture_default_str();
  cmd->add_flag("--resume", options->resume,
                "continue an interrupted prepare into the same --out from its complete shards");
  cmd->add_flag("--overwrite", options->overwrite,
                "replace the preparation already in --out (without it, one there is refused)");
  auto progress = std::make_shared<std::string>("auto");
  cmd->add_option("--progress", *progress,
                  "a progress line on stderr: on, off, or auto (when stderr is a terminal)")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  cmd->callback([options, progress, format, on_bad_record] {
    const std::string f = CLI::detail::to_lower(*format);
    options->format = f == "text" ? InputFormat::text
                      : f == "jsonl" ? InputFormat::jsonl
                                     : InputFormat::automatic;
    options->on_bad_record = CLI::detail::to_lower(*on_bad_record) == "skip"
                                 ? BadRecordPolicy::skip
                                 : BadRecordPolicy::error;
    options->progress = *progress == "on" || (*progress == "auto" && ::isatty(STDERR_FILENO) != 0);
    if (mpi_world_size() > 1) throw error("prepare runs in one process; start it without mpirun");
    const PrepareSummary s = while_doing("preparing the corpus into --out " + options->output_dir,
                                         [&] { return prepare_corpus(*options); });
    print_summary(s);
  });
}

}  // namespace boostlm::cli
