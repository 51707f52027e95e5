#include "data/prepare.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "core/rng.h"
#include "data/shard.h"

namespace boostlm {
namespace fs = std::filesystem;

namespace {

constexpr size_t kBatchTextBytes = size_t{64} << 10;
constexpr int kSplits = 2;  // 0 train, 1 val
const char* const kSplitNames[kSplits] = {"train", "val"};

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string shard_name(int split, int64_t index) {
  char name[32];
  std::snprintf(name, sizeof name, "%s_%06ld.bin", kSplitNames[split], index);
  return name;
}

// Where a split's writing starts: documents before `document` are in complete shards, and so are
// the first `offset` tokens (EOS included) of that document.
struct ResumePoint {
  int64_t document = 0, offset = 0;
};

struct Document {
  std::string text;
  int split = 0;
  int64_t index = 0;        // within its split
  int64_t skip_tokens = 0;  // already in a complete shard (resume)
};

struct WorkBatch {
  int64_t sequence = 0;
  std::vector<Document> documents;
  std::vector<std::vector<int32_t>> tokens;  // per document, EOS appended, skip applied
};

// The reader, the encoders and the writer, joined by one lock. At most max_in_flight batches
// exist at once: the reader waits for the writer to retire one before it makes another.
class BatchPipeline {
 public:
  explicit BatchPipeline(int64_t max_in_flight) : max_in_flight_(max_in_flight) {}

  // Reader: false when the pipeline was aborted.
  bool submit(WorkBatch&& batch) {
    std::unique_lock lock(mutex_);
    const double start = now_seconds();
    changed_.wait(lock, [&] { return in_flight_ < max_in_flight_ || aborted_; });
    reader_wait_seconds_ += now_seconds() - start;
    if (aborted_) return false;
    batch.sequence = submitted_++;
    ++in_flight_;
    queue_.push_back(std::move(batch));
    changed_.notify_all();
    return true;
  }
  void finish_input() {
    std::lock_guard lock(mutex_);
    input_done_ = true;
    changed_.notify_all();
  }
  // Encoder: false when there is no more work.
  bool take(WorkBatch* batch) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !queue_.empty() || input_done_ || aborted_; });
    if (aborted_ || queue_.empty()) return false;
    *batch = std::move(queue_.front());
    queue_.pop_front();
    return true;
  }
  void done(WorkBatch&& batch) {
    std::lock_guard lock(mutex_);
    const int64_t sequence = batch.sequence;
    finished_.emplace(sequence, std::move(batch));
    changed_.notify_all();
  }
  // Writer: the next batch in input order; false at the end. Waits at most `timeout_s`, setting
  // *timed_out, so the caller can print progress.
  bool next(WorkBatch* batch, double timeout_s, bool* timed_out) {
    std::unique_lock lock(mutex_);
    *timed_out = !changed_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] {
      return finished_.contains(written_) || aborted_ || (input_done_ && written_ == submitted_);
    });
    if (*timed_out || aborted_ || !finished_.contains(written_)) return false;
    auto node = finished_.extract(written_);
    *batch = std::move(node.mapped());
    return true;
  }
  void retire() {
    std::lock_guard lock(mutex_);
    ++written_;
    --in_flight_;
    changed_.notify_all();
  }
  void abort(std::exception_ptr failure) {
    std::lock_guard lock(mutex_);
    if (!failure_) failure_ = failure;
    aborted_ = true;
    changed_.notify_all();
  }
  std::exception_ptr failure() {
    std::lock_guard lock(mutex_);
    return failure_;
  }
  // How long the reader waited for room: the time the encoders were the bottleneck.
  double reader_wait_seconds() {
    std::lock_guard lock(mutex_);
    return reader_wait_seconds_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<WorkBatch> queue_;
  std::map<int64_t, WorkBatch> finished_;
  int64_t max_in_flight_, in_flight_ = 0, submitted_ = 0, written_ = 0;
  bool input_done_ = false, aborted_ = false;
  std::exception_ptr failure_;
  double reader_wait_seconds_ = 0;
};

// Reads every input in order, handing each document to `on_document`, with --on-bad-record
// applied and per-file counts kept in `files` (one entry per input, filled in as it is read).
struct ReadTimes {
  double read = 0, decompress = 0, total = 0;
};

class CorpusReader {
 public:
  CorpusReader(const PrepareOptions& options, const std::vector<std::string>& paths)
      : options_(options), paths_(paths) {}

  void read(std::vector<PrepareFileSummary>* files,
            const std::function<void(std::string&&)>& on_document) {
    const double start = now_seconds();
    files->assign(paths_.size(), {});
    DocumentReaderOptions reader_options;
    reader_options.format = options_.format;
    reader_options.text_field = options_.text_field;
    for (size_t i = 0; i < paths_.size(); ++i) {
      PrepareFileSummary& file = (*files)[i];
      file.path = paths_[i];
      std::error_code ec;
      file.bytes = static_cast<int64_t>(fs::file_size(paths_[i], ec));
      if (options_.before_file) options_.before_file(paths_[i]);
      std::unique_ptr<ByteStream> stream;
      try {
        stream = std::make_unique<ByteStream>(paths_[i]);
      } catch (const Error& e) {
        if (options_.on_bad_record == BadRecordPolicy::error)
          throw error(e.what(), "; give --on-bad-record skip to go on without it");
        warn(std::string("prepare: skipping ") + e.what());
        file.missing = true;
        ++file.skipped_records;
        continue;
      }
      current_ = stream.get();
      file.compression = compression_name(stream->compression());
      int warned = 0;
      auto on_bad = [&](const BadRecord& record) {
        if (options_.on_bad_record == BadRecordPolicy::error)
          throw error("prepare: ", record.describe(),
                      "; fix the record, or give --on-bad-record skip to leave such records out");
        ++file.skipped_records;
        if (++warned <= 5) warn("prepare: skipping " + record.describe());
        if (warned == 6)
          warn("prepare: " + paths_[i] + ": more bad records; the summary counts them");
      };
      auto on_text = [&](std::string&& text, int64_t) {
        ++file.documents;
        on_document(std::move(text));
      };
      DocumentReaderStats stats;
      try {
        stats = read_documents(*stream, paths_[i], reader_options, on_text, on_bad);
      } catch (const Error& e) {
        const std::string message = e.what();
        if (options_.on_bad_record == BadRecordPolicy::error ||
            message.rfind("prepare: ", 0) == 0)  // a bad record refused under error
          throw;
        warn("prepare: skipping the rest of " + message);
        ++file.skipped_records;
      }
      file.decompressed_bytes = stats.decompressed_bytes;
      times_.read += stream->read_seconds();
      times_.decompress += stream->decompress_seconds();
      files_done_bytes_ += file.bytes;
      current_ = nullptr;
      warn_if_not_text(paths_[i], stats);
    }
    times_.total = now_seconds() - start;
  }

  // Bytes of the input files consumed so far (approximate while a file is being read).
  int64_t bytes_done() const {
    const ByteStream* stream = current_;
    return files_done_bytes_ + (stream ? stream->file_bytes_read() : 0);
  }
  const ReadTimes& times() const { return times_; }

 private:
  static void warn_if_not_text(const std::string& path, const DocumentReaderStats& s) {
    if (s.invalid_utf8_bytes == 0 && s.nul_bytes == 0) return;
    const double share = 100.0 * static_cast<double>(s.invalid_utf8_bytes + s.nul_bytes) /
                         static_cast<double>(std::max<int64_t>(1, s.decompressed_bytes));
    char percent[32];
    std::snprintf(percent, sizeof percent, "%.2f%%", share);
    warn("prepare: " + path +
         (s.nul_bytes > 0 || share > 10 ? " looks binary, not text: " : " is not valid UTF-8: ") +
         std::to_string(s.invalid_utf8_bytes) + " invalid bytes and " +
         std::to_string(s.nul_bytes) + " NUL bytes in its documents (" + percent +
         "); the tokenizer will see them as unknown pieces. Convert it with iconv -t UTF-8, or "
         "leave it out");
  }

  const PrepareOptions& options_;
  const std::vector<std::string>& paths_;
  std::atomic<const ByteStream*> current_{nullptr};
  std::atomic<int64_t> files_done_bytes_{0};
  ReadTimes times_;
};

// One split's shards: tokens are cut into shards of exactly shard_tokens (the last shorter).
class SplitWriter {
 public:
  SplitWriter(int split, const fs::path& dir, int64_t shard_tokens, int64_t vocab_size,
              int64_t next_shard, std::function<void(PrepareShardSummary&&)> on_commit)
      : split_(split),
        dir_(dir),
        shard_tokens_(shard_tokens),
        vocab_size_(vocab_size),
        next_shard_(next_shard),
        on_commit_(std::move(on_commit)) {}

  void write(const std::vector<int32_t>& tokens, int64_t document, int64_t skip) {
    size_t done = 0;
    while (done < tokens.size()) {
      if (!current_)
        current_ = std::make_unique<ShardWriter>((dir_ / shard_name(split_, next_shard_)).string(),
                                                 vocab_size_);
      const size_t room = static_cast<size_t>(shard_tokens_ - current_->num_tokens());
      const size_t take = std::min(room, tokens.size() - done);
      current_->append(tokens.data() + done, take);
      done += take;
      if (current_->num_tokens() == shard_tokens_) {
        if (done == tokens.size())
          commit(document + 1, 0);
        else
          commit(document, skip + static_cast<int64_t>(done));
      }
    }
  }
  void finish(int64_t next_document) {
    if (current_) commit(next_document, 0);
  }

 private:
  void commit(int64_t end_document, int64_t end_offset) {
    PrepareShardSummary shard;
    shard.name = fs::path(current_->path()).filename().string();
    shard.split = kSplitNames[split_];
    shard.tokens = current_->num_tokens();
    shard.checksum = Checksum64::hex(current_->commit());
    shard.end_document = end_document;
    shard.end_offset = end_offset;
    current_.reset();
    ++next_shard_;
    on_commit_(std::move(shard));
  }

  int split_;
  fs::path dir_;
  int64_t shard_tokens_, vocab_size_, next_shard_;
  std::function<void(PrepareShardSummary&&)> on_commit_;
  std::unique_ptr<ShardWriter> current_;
};

nlohmann::json shard_json(const PrepareShardSummary& s) {
  return {{"name", s.name},
          {"split", s.split},
          {"tokens", s.tokens},
          {"checksum", s.checksum},
          {"end_document", s.end_document},
          {"end_offset", s.end_offset}};
}

PrepareShardSummary shard_from_json(const nlohmann::json& j) {
  PrepareShardSummary s;
  s.name = j.at("name").get<std::string>();
  s.split = j.at("split").get<std::string>();
  s.tokens = j.at("tokens").get<int64_t>();
  s.checksum = j.at("checksum").get<std::string>();
  s.end_document = j.at("end_document").get<int64_t>();
  s.end_offset = j.at("end_offset").get<int64_t>();
  return s;
}

// What the output depends on: a resume must see the same, or its shards would not join up.
nlohmann::json fingerprint(const PrepareOptions& options, const std::vector<std::string>& paths,
                           const std::string& tokenizer_hash) {
  nlohmann::json inputs = nlohmann::json::array();
  for (const std::string& path : paths) {
    std::error_code ec;
    inputs.push_back({{"path", fs::absolute(path).string()},
                      {"bytes", static_cast<int64_t>(fs::file_size(path, ec))}});
  }
  return {{"inputs", inputs},
          {"format", static_cast<int>(options.format)},
          {"text_field", options.text_field},
          {"seed", options.seed},
          {"val_fraction", options.val_fraction},
          {"shard_tokens", options.shard_tokens},
          {"on_bad_record", options.on_bad_record == BadRecordPolicy::skip ? "skip" : "error"},
          {"tokenizer_hash", tokenizer_hash}};
}

// Shards, temporaries and records of an earlier preparation in `dir`, all but `keep`.
void remove_earlier_output(const fs::path& dir, const std::vector<std::string>& keep) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    const bool shard = (name.rfind("train", 0) == 0 || name.rfind("val", 0) == 0) &&
                       name.find(".bin") != std::string::npos;
    const bool record = name == "meta.json" || name.rfind("progress.json", 0) == 0 ||
                        name.rfind("tokenizer_sample.txt", 0) == 0;
    if ((shard || record) && std::find(keep.begin(), keep.end(), name) == keep.end())
      fs::remove(entry.path());
  }
}


void check_enough_documents(int64_t documents, double val_fraction) {
  if (val_fraction > 0 && documents < 2)
    throw error("prepare: a validation split needs at least 2 documents (runs of non-blank lines)",
                " but the inputs hold ", documents,
                "; separate documents with blank lines or give --val-fraction 0");
}

// A seeded reservoir of documents (each cut to a byte cap), written to a file for
// Tokenizer::train: the tokenizer learns from a bounded sample of a corpus of any size.
std::string write_training_sample(const PrepareOptions& options,
                                  const std::vector<std::string>& paths, const fs::path& out) {
  Rng rng(splitmix64(options.seed ^ 0x70726570617265ull));
  std::vector<std::string> reservoir;
  int64_t seen = 0;
  std::vector<PrepareFileSummary> files;
  CorpusReader reader(options, paths);
  reader.read(&files, [&](std::string&& text) {
    if (static_cast<int64_t>(text.size()) > options.sample_document_bytes) {
      size_t cut = static_cast<size_t>(options.sample_document_bytes);
      while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
      text.resize(cut);
    }
    const int64_t slot = seen < options.sample_documents ? seen : rng.below(seen + 1);
    ++seen;
    if (slot >= options.sample_documents) return;
    if (slot == static_cast<int64_t>(reservoir.size()))
      reservoir.push_back(std::move(text));
    else
      reservoir[slot] = std::move(text);
  });
  if (seen == 0) throw error("prepare: the input files contain no text");
  check_enough_documents(seen, options.val_fraction);  // before a tokenizer is trained for nothing
  const std::string path = (out / "tokenizer_sample.txt").string();
  AtomicFile file(path);
  for (const std::string& document : reservoir) {
    file.write(document);
    file.write("\n\n");
  }
  file.commit();
  return path;
}

struct TokenizerChoice {
  std::string path;
  bool trained = false;
};

TokenizerChoice obtain_tokenizer(const PrepareOptions& options,
                                 const std::vector<std::string>& paths, const fs::path& out) {
  TokenizerChoice choice;
  if (options.tokenizer_path.empty()) {
    choice.trained = true;
    choice.path = (out / "tokenizer.model").string();
    const std::string sample = write_training_sample(options, paths, out);
    TokenizerTrainOptions train_options;
    train_options.seed = options.seed;
    try {
      Tokenizer::train({sample}, (out / "tokenizer").string(), options.vocab_size, train_options);
    } catch (...) {
      fs::remove(sample);
      throw;
    }
    fs::remove(sample);
    return choice;
  }
  // Loading first refuses a missing or corrupt tokenizer before anything is copied.
  const std::string source = Tokenizer::load(options.tokenizer_path).path();
  choice.path = (out / tokenizer_file_name(source)).string();
  std::error_code ec;
  if (!fs::equivalent(source, choice.path, ec))
    write_file_atomically(choice.path, read_text_file(source));
  return choice;
}

std::string format_duration(double seconds) {
  char text[32];
  if (seconds < 90)
    std::snprintf(text, sizeof text, "%.0f s", seconds);
  else if (seconds < 5400)
    std::snprintf(text, sizeof text, "%.0f min", seconds / 60);
  else
    std::snprintf(text, sizeof text, "%.1f h", seconds / 3600);
  return text;
}

void print_progress(int64_t bytes_done, int64_t bytes_total, int64_t documents, int64_t tokens,
                    double elapsed_s, bool final_line) {
  const double mb = static_cast<double>(bytes_done) / 1e6;
  const double rate = elapsed_s > 0 ? mb / elapsed_s : 0;
  const double left_mb = static_cast<double>(bytes_total - bytes_done) / 1e6;
  const std::string eta = rate > 0 ? format_duration(left_mb / rate) : "?";
  std::fprintf(stderr,
               "\rprepare: %.1f/%.1f MB read, %ld documents, %.2fM tokens, %.1f MB/s, ETA %s   %s",
               mb, static_cast<double>(bytes_total) / 1e6, documents,
               static_cast<double>(tokens) / 1e6, rate, eta.c_str(), final_line ? "\n" : "");
  std::fflush(stderr);
}

struct ResumeState {
  std::vector<PrepareShardSummary> shards;
  ResumePoint from[kSplits];
  int64_t next_shard[kSplits] = {0, 0};
};

// The complete shards an interrupted run left, checked against this run's options.
ResumeState load_resume_state(const fs::path& out, const nlohmann::json& expected) {
  ResumeState state;
  const fs::path progress = out / "progress.json";
  if (!fs::exists(progress)) return state;
  const nlohmann::json saved =
      nlohmann::json::parse(read_text_file(progress.string()), nullptr, false);
  if (!saved.is_object() || !saved.contains("fingerprint") || !saved.contains("shards"))
    throw error(progress.string(), " is not a prepare progress record; run without --resume");
  for (const auto& [key, value] : expected.items()) {
    if (saved["fingerprint"].value(key, nlohmann::json()) != value)
      throw error("prepare --resume: ", progress.string(), " was written with ", key, " ",
                  saved["fingerprint"].value(key, nlohmann::json()).dump(), " but this run has ",
                  value.dump(),
                  "; give the same inputs and options, or run without --resume to start over");
  }
  for (const nlohmann::json& j : saved["shards"]) {
    PrepareShardSummary shard = shard_from_json(j);
    const std::string path = (out / shard.name).string();
    if (!fs::exists(path) || read_shard_header(path).num_tokens != shard.tokens)
      throw error("prepare --resume: ", path, " is missing or not the shard ", progress.string(),
                  " records; run without --resume to start over");
    const int split = shard.split == "val" ? 1 : 0;
    state.from[split] = {shard.end_document, shard.end_offset};
    ++state.next_shard[split];
    state.shards.push_back(std::move(shard));
  }
  return state;
}

}  // namespace

std::vector<std::string> PrepareSummary::shard_paths(const std::string& split) const {
  std::vector<std::string> paths;
  const fs::path dir = fs::path(meta_path).parent_path();
  for (const PrepareShardSummary& shard : shards)
    if (shard.split == split) paths.push_back((dir / shard.name).string());
  return paths;
}

bool document_goes_to_val(std::string_view text, double val_fraction, uint64_t seed) {
  if (val_fraction <= 0) return false;
  const uint64_t hash = splitmix64(Checksum64::of(text.data(), text.size()) ^ splitmix64(seed));
  return static_cast<double>(hash >> 11) * 0x1.0p-53 < val_fraction;
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

namespace {

void check_options(const PrepareOptions& options) {
  if (options.output_dir.empty()) throw error("prepare: no output directory given");
  if (!(options.val_fraction >= 0.0 && options.val_fraction < 1.0))
    throw error("prepare: --val-fraction ", options.val_fraction, " is outside [0, 1)");
  if (options.threads < 1) throw error("prepare: --threads ", options.threads, " must be >= 1");
  if (options.shard_tokens < 1 || options.shard_tokens > std::numeric_limits<int32_t>::max())
    throw error("prepare: --shard-tokens ", options.shard_tokens, " is outside [1, 2^31-1]");
}

void write_meta(const PrepareSummary& summary, const PrepareOptions& options,
                const Tokenizer& tokenizer) {
  auto split_entry = [&](const char* split, int64_t documents, int64_t tokens) {
    nlohmann::json shards = nlohmann::json::array();
    for (const PrepareShardSummary& shard : summary.shards)
      if (shard.split == split)
        shards.push_back(
            {{"name", shard.name}, {"tokens", shard.tokens}, {"checksum", shard.checksum}});
    if (shards.empty()) return nlohmann::json(nullptr);
    return nlohmann::json{{"documents", documents}, {"tokens", tokens}, {"shards", shards}};
  };
  nlohmann::json inputs = nlohmann::json::array();
  for (const PrepareFileSummary& f : summary.files)
    inputs.push_back({{"path", fs::absolute(f.path).string()},
                      {"compression", f.compression},
                      {"bytes", f.bytes},
                      {"decompressed_bytes", f.decompressed_bytes},
                      {"documents", f.documents},
                      {"skipped_records", f.skipped_records}});
  const nlohmann::json meta = {
      {"format", "boostlm-corpus-2"},
      {"vocab_size", summary.vocab_size},
      {"bos_id", tokenizer.bos_id()},
      {"eos_id", tokenizer.eos_id()},
      {"tokenizer", fs::path(summary.tokenizer_path).filename().string()},
      {"tokenizer_hash", tokenizer_identity(summary.tokenizer_path).hash},
      {"tokenizer_source",
       summary.trained_tokenizer ? "trained" : fs::absolute(options.tokenizer_path).string()},
      {"shard_version", summary.vocab_size <= 65536 ? kShardVersionU16 : kShardVersionU32},
      {"shard_tokens", options.shard_tokens},
      {"train", split_entry("train", summary.train_documents, summary.train_tokens)},
      {"val", split_entry("val", summary.val_documents, summary.val_tokens)},
      {"val_fraction", options.val_fraction},
      {"seed", options.seed},
      {"text_field", options.text_field},
      {"documents",
       "EOS after each; val when a seeded hash of the text is below val_fraction; input order"},
      {"skipped_records", summary.skipped_records},
      {"inputs", inputs},
  };
  write_file_atomically(summary.meta_path, meta.dump(2) + "\n");
}

}  // namespace

PrepareSummary prepare_corpus(const PrepareOptions& options) {
  check_options(options);
  const double start = now_seconds();
  const std::vector<std::string> paths = expand_inputs(options.input_files);
  const fs::path out(options.output_dir);
  fs::create_directories(out);

  PrepareSummary summary;
  summary.meta_path = (out / "meta.json").string();
  for (const std::string& path : paths) {
    std::error_code ec;
    summary.input_bytes += static_cast<int64_t>(fs::file_size(path, ec));
  }

  // A resumed run keeps the tokenizer it made (training is deterministic, but slow).
  const fs::path progress = out / "progress.json";
  TokenizerChoice choice;
  if (options.resume && options.tokenizer_path.empty() && fs::exists(progress) &&
      fs::exists(out / "tokenizer.model")) {
    choice = {(out / "tokenizer.model").string(), true};
  } else {
    if (!options.resume) remove_earlier_output(out, {});
    choice = obtain_tokenizer(options, paths, out);
  }
  summary.tokenizer_seconds = now_seconds() - start;
  summary.tokenizer_path = choice.path;
  summary.trained_tokenizer = choice.trained;
  const Tokenizer tokenizer = Tokenizer::load(choice.path);
  summary.vocab_size = tokenizer.vocab_size();
  const int32_t eos = tokenizer.eos_id();

  const nlohmann::json print = fingerprint(options, paths, tokenizer_identity(choice.path).hash);
  ResumeState resume;
  if (options.resume) {
    resume = load_resume_state(out, print);
    summary.resumed = !resume.shards.empty();
    std::vector<std::string> keep = {fs::path(choice.path).filename().string(), "progress.json"};
    for (const PrepareShardSummary& shard : resume.shards) keep.push_back(shard.name);
    remove_earlier_output(out, keep);
  }
  summary.shards = resume.shards;

  auto record_progress = [&](PrepareShardSummary&& shard) {
    summary.shards.push_back(std::move(shard));
    nlohmann::json shards = nlohmann::json::array();
    for (const PrepareShardSummary& s : summary.shards) shards.push_back(shard_json(s));
    write_file_atomically(
        progress.string(),
        nlohmann::json{{"fingerprint", print}, {"shards", shards}}.dump(1) + "\n");
  };
  std::vector<std::unique_ptr<SplitWriter>> writers;
  for (int split = 0; split < kSplits; ++split)
    writers.push_back(std::make_unique<SplitWriter>(split, out, options.shard_tokens,
                                                    summary.vocab_size, resume.next_shard[split],
                                                    record_progress));

  // Reader thread: documents in input order, batched; the split and index decided here.
  BatchPipeline pipeline(2 * options.threads + 2);
  CorpusReader reader(options, paths);
  int64_t documents[kSplits] = {0, 0};
  std::thread read_thread([&] {
    try {
      WorkBatch batch;
      size_t batch_bytes = 0;
      reader.read(&summary.files, [&](std::string&& text) {
        const int split = document_goes_to_val(text, options.val_fraction, options.seed) ? 1 : 0;
        const int64_t index = documents[split]++;
        const ResumePoint& from = resume.from[split];
        if (index < from.document) return;  // already in a complete shard
        batch_bytes += text.size();
        batch.documents.push_back(
            {std::move(text), split, index, index == from.document ? from.offset : 0});
        if (batch_bytes >= kBatchTextBytes || batch.documents.size() >= 8192) {
          if (!pipeline.submit(std::move(batch))) throw error("prepare: stopped");
          batch = WorkBatch{};
          batch_bytes = 0;
        }
      });
      if (!batch.documents.empty()) pipeline.submit(std::move(batch));
      pipeline.finish_input();
    } catch (...) {
      pipeline.abort(std::current_exception());
    }
  });
  std::vector<double> encode_seconds(static_cast<size_t>(options.threads), 0.0);
  std::vector<std::thread> encoders;
  for (int t = 0; t < options.threads; ++t) {
    encoders.emplace_back([&, t] {
      try {
        WorkBatch batch;
        while (pipeline.take(&batch)) {
          const double begin = now_seconds();
          batch.tokens.resize(batch.documents.size());
          for (size_t i = 0; i < batch.documents.size(); ++i) {
            Document& document = batch.documents[i];
            std::vector<int32_t> tokens = tokenizer.encode(document.text);
            tokens.push_back(eos);
            const auto skip = std::min<size_t>(tokens.size(), document.skip_tokens);
            tokens.erase(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(skip));
            batch.tokens[i] = std::move(tokens);
            document.text = std::string();
          }
          encode_seconds[t] += now_seconds() - begin;
          pipeline.done(std::move(batch));
        }
      } catch (...) {
        pipeline.abort(std::current_exception());
      }
    });
  }

  // This thread writes, in input order.
  int64_t tokens_written = 0, documents_written = 0;
  const double write_start = now_seconds();
  double last_progress = write_start;
  try {
    WorkBatch batch;
    bool timed_out = false;
    for (;;) {
      const bool got = pipeline.next(&batch, 0.5, &timed_out);
      if (options.progress && now_seconds() - last_progress >= 1.0) {
        last_progress = now_seconds();
        print_progress(reader.bytes_done(), summary.input_bytes, documents_written, tokens_written,
                       last_progress - write_start, false);
      }
      if (!got) {
        if (timed_out) continue;
        break;
      }
      const double begin = now_seconds();
      for (size_t i = 0; i < batch.documents.size(); ++i) {
        const Document& document = batch.documents[i];
        writers[document.split]->write(batch.tokens[i], document.index, document.skip_tokens);
        tokens_written += static_cast<int64_t>(batch.tokens[i].size());
      }
      documents_written += static_cast<int64_t>(batch.documents.size());
      summary.write_seconds += now_seconds() - begin;
      pipeline.retire();
    }
  } catch (...) {
    pipeline.abort(std::current_exception());
  }
  read_thread.join();
  for (std::thread& encoder : encoders) encoder.join();
  if (std::exception_ptr failure = pipeline.failure()) std::rethrow_exception(failure);
  if (options.progress)
    print_progress(summary.input_bytes, summary.input_bytes, documents_written, tokens_written,
                   now_seconds() - write_start, true);

  const int64_t total_documents = documents[0] + documents[1];
  if (total_documents == 0) throw error("prepare: the input files contain no text");
  check_enough_documents(total_documents, options.val_fraction);
  if (options.val_fraction > 0 && documents[1] == 0)
    throw error("prepare: no document of ", total_documents,
                " fell in the validation split at --val-fraction ", options.val_fraction,
                " (the split hashes each document's text); give more documents, another --seed, or "
                "--val-fraction 0");
  for (int split = 0; split < kSplits; ++split) writers[split]->finish(documents[split]);

  summary.train_documents = documents[0];
  summary.val_documents = documents[1];
  for (const PrepareShardSummary& shard : summary.shards)
    (shard.split == "val" ? summary.val_tokens : summary.train_tokens) += shard.tokens;
  for (const PrepareFileSummary& file : summary.files) {
    summary.decompressed_bytes += file.decompressed_bytes;
    summary.skipped_records += file.skipped_records;
  }
  const ReadTimes& times = reader.times();
  summary.read_seconds = times.read;
  summary.decompress_seconds = times.decompress;
  summary.parse_seconds =
      std::max(0.0, times.total - times.read - times.decompress - pipeline.reader_wait_seconds());
  for (double s : encode_seconds) summary.encode_seconds += s;
  write_meta(summary, options, tokenizer);
  summary.total_seconds = now_seconds() - start;
  return summary;
}

std::string prepared_tokenizer_file(const std::string& dir) {
  const fs::path meta_path = fs::path(dir) / "meta.json";
  if (fs::exists(meta_path)) {
    const nlohmann::json meta =
        nlohmann::json::parse(read_text_file(meta_path.string()), nullptr, false);
    if (meta.is_object() && meta.contains("tokenizer") && meta["tokenizer"].is_string()) {
      const fs::path named = fs::path(dir) / meta["tokenizer"].get<std::string>();
      if (fs::exists(named)) return named.string();
    }
  }
  return find_tokenizer(dir);  // tokenizer.model, else tokenizer.json
}

TokenizerIdentity prepared_tokenizer(const std::string& data) {
  std::string dir = data;
  if (fs::is_regular_file(data)) {  // a meta.json speaks for its directory; a lone shard, nothing
    if (fs::path(data).filename() != "meta.json") return {};
    dir = fs::path(data).parent_path().string();
  }
  const std::string file = prepared_tokenizer_file(dir);
  const fs::path model = file.empty() ? fs::path(dir) / "tokenizer.model" : fs::path(file);
  const fs::path meta_path = fs::path(dir) / "meta.json";
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
                "tokenizer file back");
  return recorded;
}

std::vector<std::string> prepared_shards(const std::string& dir, const std::string& split) {
  std::vector<std::string> shards;
  const fs::path meta_path = fs::path(dir) / "meta.json";
  if (fs::exists(meta_path)) {
    const nlohmann::json meta =
        nlohmann::json::parse(read_text_file(meta_path.string()), nullptr, false);
    if (meta.is_object() && meta.contains(split) && meta[split].is_object() &&
        meta[split].contains("shards")) {
      for (const nlohmann::json& shard : meta[split]["shards"])
        shards.push_back((fs::path(dir) / shard.at("name").get<std::string>()).string());
      return shards;
    }
  }
  std::error_code ec;
  if (fs::is_directory(dir, ec)) {
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (name.size() == split.size() + 11 && name.rfind(split + "_", 0) == 0 &&
          name.ends_with(".bin"))
        shards.push_back(entry.path().string());
    }
  }
  std::sort(shards.begin(), shards.end());
  const fs::path single = fs::path(dir) / (split + ".bin");
  if (shards.empty() && fs::exists(single)) shards.push_back(single.string());
  return shards;
}

}  // namespace boostlm
