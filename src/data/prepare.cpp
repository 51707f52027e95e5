#include "data/prepare.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "core/rng.h"
#include "data/shard.h"
#include "data/shuffle.h"
#include "data/tokenizer.h"

namespace boostlm {
namespace fs = std::filesystem;

namespace {

struct Corpus {
  std::vector<std::string> documents;
  nlohmann::json inputs = nlohmann::json::array();
  int64_t bytes = 0;
};

struct Split {
  std::vector<int64_t> order;  // shuffled document indices: val first, then train
  int64_t val_documents = 0;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Bytes that are not part of a well-formed UTF-8 sequence (overlong forms and surrogates
// included), and NUL bytes, which text files do not hold.
struct TextCheck {
  int64_t invalid = 0, nul = 0;
};

TextCheck check_utf8(std::string_view text) {
  TextCheck check;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      check.nul += c == 0;
      ++i;
      continue;
    }
    int len = 0;
    uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0)
      len = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0)
      len = 3, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0)
      len = 4, cp = c & 0x07;
    bool ok = len > 0 && i + len <= n;
    for (int k = 1; ok && k < len; ++k) {
      ok = (p[i + k] & 0xC0) == 0x80;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && cp >= kMin[len] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (ok) {
      i += len;
    } else {
      ++check.invalid;
      ++i;
    }
  }
  return check;
}

void warn_if_not_text(const std::string& path, std::string_view text) {
  const TextCheck check = check_utf8(text);
  if (check.invalid == 0 && check.nul == 0) return;
  const double share = 100.0 * static_cast<double>(check.invalid + check.nul) /
                       static_cast<double>(std::max<size_t>(1, text.size()));
  char percent[32];
  std::snprintf(percent, sizeof percent, "%.2f%%", share);
  warn("prepare: " + path +
       (check.nul > 0 || share > 10 ? " looks binary, not text: " : " is not valid UTF-8: ") +
       std::to_string(check.invalid) + " invalid bytes and " + std::to_string(check.nul) +
       " NUL bytes of " + std::to_string(text.size()) + " (" + percent +
       "); the tokenizer will see them as unknown pieces. Convert it with iconv -t UTF-8, or leave "
       "it out");
}

Corpus load_corpus(const std::vector<std::string>& input_files) {
  if (input_files.empty()) throw error("prepare: no input files given");
  Corpus corpus;
  for (const std::string& path : input_files) {
    const std::string text = read_text_file(path);
    warn_if_not_text(path, text);
    std::vector<std::string> documents = split_documents(text);
    corpus.inputs.push_back({{"path", fs::absolute(path).string()},
                             {"bytes", text.size()},
                             {"documents", documents.size()}});
    corpus.bytes += static_cast<int64_t>(text.size());
    for (std::string& document : documents) corpus.documents.push_back(std::move(document));
  }
  if (corpus.documents.empty()) throw error("prepare: the input files contain no text");
  return corpus;
}

Tokenizer obtain_tokenizer(const PrepareOptions& options, const std::string& model_path,
                           bool* trained) {
  *trained = options.tokenizer_path.empty();
  if (*trained) {
    TokenizerTrainOptions train_options;
    train_options.seed = options.seed;
    Tokenizer::train(options.input_files, (fs::path(options.output_dir) / "tokenizer").string(),
                     options.vocab_size, train_options);
    return Tokenizer::load(model_path);
  }
  Tokenizer::load(options.tokenizer_path);  // refuses a missing or corrupt model before copying
  std::error_code ec;
  if (!fs::equivalent(options.tokenizer_path, model_path, ec)) {
    write_file_atomically(model_path, read_text_file(options.tokenizer_path));
  }
  return Tokenizer::load(model_path);
}

Split split_documents_by_seed(int64_t num_documents, double val_fraction, uint64_t seed) {
  if (!(val_fraction >= 0.0 && val_fraction < 1.0)) {
    throw error("prepare: --val-fraction ", val_fraction, " is outside [0, 1)");
  }
  if (val_fraction > 0.0 && num_documents < 2) {
    throw error("prepare: a validation split needs at least 2 documents (runs of non-blank lines)",
                " but the inputs hold ", num_documents,
                "; separate documents with blank lines or give --val-fraction 0");
  }
  Split split;
  Rng rng(seed);
  split.order = shuffled_indices(num_documents, rng);
  if (val_fraction > 0.0) {
    const auto wanted = static_cast<int64_t>(std::llround(val_fraction * num_documents));
    split.val_documents = std::clamp<int64_t>(wanted, 1, num_documents - 1);
  }
  return split;
}

// Documents are independent, so they encode in parallel; the order of the output is fixed.
std::vector<std::vector<int32_t>> encode_documents(const Tokenizer& tokenizer,
                                                   const std::vector<std::string>& documents) {
  std::vector<std::vector<int32_t>> encoded(documents.size());
  std::exception_ptr failure;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < static_cast<int64_t>(documents.size()); ++i) {
    try {
      encoded[i] = tokenizer.encode(documents[i]);
    } catch (...) {
#pragma omp critical(boostlm_prepare_failure)
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
  return encoded;
}

std::vector<uint32_t> concatenate(const std::vector<std::vector<int32_t>>& encoded,
                                  const std::vector<int64_t>& order, int64_t begin, int64_t end,
                                  int32_t eos_id) {
  size_t total = 0;
  for (int64_t i = begin; i < end; ++i) total += encoded[order[i]].size() + 1;
  std::vector<uint32_t> tokens;
  tokens.reserve(total);
  for (int64_t i = begin; i < end; ++i) {
    const std::vector<int32_t>& document = encoded[order[i]];
    tokens.insert(tokens.end(), document.begin(), document.end());
    tokens.push_back(static_cast<uint32_t>(eos_id));
  }
  return tokens;
}

void write_meta(const PrepareSummary& summary, const PrepareOptions& options, const Corpus& corpus,
                const Tokenizer& tokenizer) {
  auto split_entry = [](const std::string& path, int64_t documents, int64_t tokens) {
    if (path.empty()) return nlohmann::json(nullptr);
    return nlohmann::json{
        {"path", fs::path(path).filename().string()}, {"documents", documents}, {"tokens", tokens}};
  };
  const nlohmann::json meta = {
      {"format", "boostlm-corpus-1"},
      {"vocab_size", summary.vocab_size},
      {"bos_id", tokenizer.bos_id()},
      {"eos_id", tokenizer.eos_id()},
      {"tokenizer", fs::path(summary.tokenizer_path).filename().string()},
      {"tokenizer_hash", tokenizer_identity(summary.tokenizer_path).hash},
      {"tokenizer_source",
       summary.trained_tokenizer ? "trained" : fs::absolute(options.tokenizer_path).string()},
      {"shard_version", summary.vocab_size <= 65536 ? kShardVersionU16 : kShardVersionU32},
      {"train", split_entry(summary.train_path, summary.train_documents, summary.train_tokens)},
      {"val", split_entry(summary.val_path, summary.val_documents, summary.val_tokens)},
      {"val_fraction", options.val_fraction},
      {"seed", options.seed},
      {"documents", "runs of non-blank lines, EOS after each, split and ordered by seed"},
      {"inputs", corpus.inputs},
  };
  write_file_atomically(summary.meta_path, meta.dump(2) + "\n");
}

}  // namespace

TokenizerIdentity prepared_tokenizer(const std::string& dir) {
  const fs::path model = fs::path(dir) / "tokenizer.model", meta_path = fs::path(dir) / "meta.json";
  TokenizerIdentity found = tokenizer_identity(model.string());
  if (!fs::exists(meta_path)) return found;
  const nlohmann::json meta = nlohmann::json::parse(read_text_file(meta_path.string()), nullptr,
                                                    /*allow_exceptions=*/false);
  if (!meta.is_object() || !meta.contains("tokenizer_hash") || !meta["tokenizer_hash"].is_string())
    return found;  // prepared before the hash was recorded
  TokenizerIdentity recorded{meta["tokenizer_hash"].get<std::string>(), found.name};
  if (!found.known()) recorded.name = meta_path.string();
  if (found.known() && found.hash != recorded.hash)
    throw error(model.string(), " (hash ", found.hash.substr(0, 12),
                ") is not the tokenizer the shards beside it were prepared with (",
                meta_path.string(), " records hash ", recorded.hash.substr(0, 12),
                "): it was replaced afterwards. Run boostlm prepare again, or put the right "
                "tokenizer.model back");
  return recorded;
}

std::vector<std::string> split_documents(std::string_view text) {
  std::vector<std::string> documents;
  std::string current;
  auto finish = [&] {
    if (!current.empty()) documents.push_back(std::move(current));
    current.clear();
  };
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t\f\v") == std::string_view::npos) {
      finish();
      continue;
    }
    if (!current.empty()) current += '\n';
    current += line;
  }
  finish();
  return documents;
}

PrepareSummary prepare_corpus(const PrepareOptions& options) {
  if (options.output_dir.empty()) throw error("prepare: no output directory given");
  const Corpus corpus = load_corpus(options.input_files);
  const auto num_documents = static_cast<int64_t>(corpus.documents.size());
  const Split split = split_documents_by_seed(num_documents, options.val_fraction, options.seed);
  fs::create_directories(options.output_dir);
  const fs::path out(options.output_dir);

  PrepareSummary summary;
  summary.tokenizer_path = (out / "tokenizer.model").string();
  summary.meta_path = (out / "meta.json").string();
  summary.input_bytes = corpus.bytes;

  auto start = std::chrono::steady_clock::now();
  const Tokenizer tokenizer =
      obtain_tokenizer(options, summary.tokenizer_path, &summary.trained_tokenizer);
  summary.tokenizer_seconds = seconds_since(start);
  summary.vocab_size = tokenizer.vocab_size();

  start = std::chrono::steady_clock::now();
  const auto encoded = encode_documents(tokenizer, corpus.documents);
  summary.encode_seconds = seconds_since(start);

  const int32_t eos = tokenizer.eos_id();
  const std::vector<uint32_t> train =
      concatenate(encoded, split.order, split.val_documents, num_documents, eos);
  summary.train_path = (out / "train.bin").string();
  summary.train_documents = num_documents - split.val_documents;
  summary.train_tokens = static_cast<int64_t>(train.size());
  write_shard(summary.train_path, train, summary.vocab_size);
  if (split.val_documents > 0) {
    const std::vector<uint32_t> val =
        concatenate(encoded, split.order, 0, split.val_documents, eos);
    summary.val_path = (out / "val.bin").string();
    summary.val_documents = split.val_documents;
    summary.val_tokens = static_cast<int64_t>(val.size());
    write_shard(summary.val_path, val, summary.vocab_size);
  } else {
    fs::remove(out / "val.bin");  // a stale split from an earlier run would contradict meta.json
  }
  write_meta(summary, options, corpus, tokenizer);
  return summary;
}

}  // namespace boostlm
