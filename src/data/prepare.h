// Turning a corpus (text or JSON Lines files, plain, gzip or zstd; data/prepare_input.h) into a
// tokenizer plus train/val token shards, streaming, in bounded memory.
//
// Pipeline: one reader thread decompresses the files in order and cuts them into records (JSON
// Lines lines, unparsed, or plain-text documents), in batches of about 64 KiB; `threads` workers
// parse and encode batches; the calling thread writes them in input order. Only decompressing
// and cutting lines are serial, so the encoders keep every core busy. At most 8*threads+2
// batches are in flight, so resident memory is that many batches (text plus tokens, about
// 0.3 MiB each), the reader's and writers' 1 MiB buffers and the tokenizer, whatever the corpus
// size (one document longer than that is held whole). With threads == 1 the one calling thread
// does it all in turn: one core's rate, the baseline of the scaling.
//
// Each document is encoded on its own and followed by the EOS token. It goes to val when a seeded
// hash of its text falls below val_fraction, else to train: a decision that needs no other
// document, so it streams, and identical documents share a split. Documents keep their input
// order within each split, so the output bytes do not depend on the thread count.
//
// Output in output_dir: the tokenizer (tokenizer.model for SentencePiece, else the given file
// under its own name), train_000000.bin, ... and val_000000.bin, ... of shard_tokens tokens each
// (the last of each split shorter; a document may continue into the next shard), each written
// atomically, and meta.json, written last, so its presence marks a complete preparation. It lists
// the shards with their token counts and checksums and records the tokenizer's identity
// (tokenizer_hash), which train and eval check against a checkpoint's. progress.json, rewritten
// after every shard, lets `resume` continue an interrupted run from its complete shards.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "data/prepare_input.h"
#include "data/tokenizer.h"

namespace boostlm {

enum class BadRecordPolicy { error, skip };

struct PrepareOptions {
  std::vector<std::string> input_files;  // files, directories or glob patterns
  std::string output_dir;
  int vocab_size = 8192;       // for a trained tokenizer; a given one keeps its own
  std::string tokenizer_path;  // an existing tokenizer; empty: train a SentencePiece model
  double val_fraction = 0.05;  // expected fraction of documents, in [0, 1)
  uint64_t seed = 1337;        // split hash and tokenizer training sample
  InputFormat format = InputFormat::automatic;
  std::string text_field = "text";
  BadRecordPolicy on_bad_record = BadRecordPolicy::error;
  int threads = 1;                     // encoding threads (1: everything on the calling thread)
  int64_t shard_tokens = 100'000'000;  // tokens per shard
  bool resume = false;                 // continue from progress.json's complete shards
  bool overwrite = false;              // replace a preparation already in output_dir
  bool progress = false;               // a progress line on stderr
  // The tokenizer's training sample: a seeded reservoir of this many documents, each cut to
  // sample_document_bytes, so at most their product is held (default 128 MiB).
  int64_t sample_documents = 32768;
  int64_t sample_document_bytes = 4096;
  // For tests: called by the reader before it opens each input file.
  std::function<void(const std::string&)> before_file;
};

struct PrepareFileSummary {
  std::string path;
  std::string compression;
  std::string format;              // what it was read as: "text" or "jsonl"
  int64_t bytes = 0;               // on disk
  int64_t decompressed_bytes = 0;  // text read
  int64_t documents = 0;
  int64_t tokens = 0;  // of its documents, EOS included, in the shards of either split
  int64_t skipped_records = 0;
  bool missing = false;  // vanished before it was read (skipped under --on-bad-record skip)
};

struct PrepareShardSummary {
  std::string name;   // file name within the output directory
  std::string split;  // "train" or "val"
  int64_t tokens = 0;
  std::string checksum;  // Checksum64 of the token bytes after the header, hex
  // Where the next shard of this split starts: the record (counted over all inputs, bad ones
  // included) whose document it continues or the first after it, and how many of that
  // document's tokens this and earlier shards hold.
  int64_t end_record = 0, end_offset = 0;
  std::map<int32_t, int64_t> file_tokens;  // its tokens per input file (index in `files`)
};

struct PrepareSummary {
  std::string tokenizer_path;
  std::string meta_path;
  bool trained_tokenizer = false;
  bool resumed = false;
  int64_t vocab_size = 0;
  int64_t input_bytes = 0;  // on disk
  int64_t decompressed_bytes = 0;
  int64_t train_documents = 0;
  int64_t val_documents = 0;
  int64_t train_tokens = 0;  // including one EOS per document
  int64_t val_tokens = 0;
  int64_t skipped_records = 0;
  std::vector<PrepareFileSummary> files;
  std::vector<PrepareShardSummary> shards;
  double tokenizer_seconds = 0;
  // The reader's time: reading files, decompressing, cutting lines into records; not the time it
  // waited for the encoders.
  double read_seconds = 0, decompress_seconds = 0, cut_seconds = 0;
  // Parsing JSON Lines records and tokenizing, each summed over the encoding threads.
  double parse_seconds = 0, encode_seconds = 0;
  double write_seconds = 0;
  double total_seconds = 0;
  double cpu_seconds = 0;  // user and system, all threads
  std::vector<std::string> shard_paths(const std::string& split) const;
};

PrepareSummary prepare_corpus(const PrepareOptions& options);

// The tokenizer the shards of a prepared directory were made with: meta.json's tokenizer_hash, or,
// for a preparation older than it (or shards from elsewhere), the directory's tokenizer file;
// unknown when there is neither. Throws Error when the directory's tokenizer file is not the one
// meta.json records (replaced after preparing: its checkpoints would carry the wrong one).
TokenizerIdentity prepared_tokenizer(const std::string& dir);

// The tokenizer file of a prepared directory (meta.json's "tokenizer", else tokenizer.model);
// empty when there is none.
std::string prepared_tokenizer_file(const std::string& dir);

// The shards of one split ("train" or "val") of a prepared directory, in order: meta.json's list,
// else <split>_NNNNNN.bin files, else the single <split>.bin of older preparations; empty when
// there is none.
std::vector<std::string> prepared_shards(const std::string& dir, const std::string& split);

// The documents of one text, as defined in data/prepare_input.h.
std::vector<std::string> split_documents(std::string_view text);

// Whether the split hash sends a document to val.
bool document_goes_to_val(std::string_view text, double val_fraction, uint64_t seed);

}  // namespace boostlm
