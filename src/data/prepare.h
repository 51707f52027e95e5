// Turning plain-text files into a tokenizer plus train/val token shards.
//
// A document is a maximal run of non-blank lines (a blank line holds only whitespace); its lines
// are joined with '\n'. Files never share a document. Each document is encoded on its own and
// followed by the EOS token, so EOS separates documents in the shards.
//
// The split is by whole documents: the documents are shuffled with a permutation drawn from
// `seed`, the first round(val_fraction * documents) of them (at least one when val_fraction > 0)
// go to val.bin and the rest to train.bin, both in that shuffled order. Shuffling also interleaves
// the input files, so a loader reading train.bin in order does not see one source at a time.
//
// Output in output_dir: tokenizer.model, train.bin, val.bin (absent when val_fraction is 0) and
// meta.json, written last, so its presence marks a complete preparation. meta.json records the
// tokenizer's identity (tokenizer_hash, data/tokenizer.h), which train and eval check against a
// checkpoint's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace boostlm {

struct PrepareOptions {
  std::vector<std::string> input_files;  // UTF-8 text
  std::string output_dir;
  int vocab_size = 8192;       // for a trained tokenizer; a given one keeps its own
  std::string tokenizer_path;  // existing SentencePiece model; empty: train one on the inputs
  double val_fraction = 0.05;  // fraction of documents, in [0, 1)
  uint64_t seed = 1337;        // split permutation and tokenizer training sample
};

struct PrepareSummary {
  std::string tokenizer_path;  // <output_dir>/tokenizer.model
  std::string train_path;
  std::string val_path;  // empty when no validation split was asked for
  std::string meta_path;
  bool trained_tokenizer = false;
  int64_t vocab_size = 0;
  int64_t input_bytes = 0;
  int64_t train_documents = 0;
  int64_t val_documents = 0;
  int64_t train_tokens = 0;  // including one EOS per document
  int64_t val_tokens = 0;
  double tokenizer_seconds = 0;
  double encode_seconds = 0;
};

PrepareSummary prepare_corpus(const PrepareOptions& options);

// The tokenizer the shards of a prepared directory were made with: meta.json's tokenizer_hash, or,
// for a preparation older than it (or shards from elsewhere), the directory's tokenizer.model;
// unknown when there is neither. Throws Error when the directory's tokenizer.model is not the one
// meta.json records (replaced after preparing: its checkpoints would carry the wrong one).
TokenizerIdentity prepared_tokenizer(const std::string& dir);

// The documents of one text, as defined above.
std::vector<std::string> split_documents(std::string_view text);

}  // namespace boostlm
