#include "data/prepare.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
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
#include "core/profile.h"
#include "core/rng.h"
#include "data/shard.h"

namespace boostlm {
namespace fs = std::filesystem;

namespace {

constexpr size_t kBatchTextBytes = size_t{64} << 10;
// Batches in flight per encoding thread: enough that an encoder finds work while the writer waits
// for a core to retire finished batches (with more threads than cores it often does).
constexpr int kBatchesInFlightPerThread = 8;
constexpr int kSplits = 2;  // 0 train, 1 val
const char* const kSplitNames[kSplits] = {"train", "val"};

std::string shard_name(int split, int64_t index) {
  char name[32];
  std::snprintf(name, sizeof name, "%s_%06ld.bin", kSplitNames[split], index);
  return name;
}

// Where a split's writing starts: documents before `document` are in complete shards, and so are
// Where a split's writing starts: documents of records before `record` (counted over all inputs)
// are in complete shards, and so are the first `offset` tokens (EOS included) of the one at it.
struct ResumePoint {
  int64_t record = 0, offset = 0;
};

struct ResumeState {
  explicit ResumeState(size_t input_files) {
    for (std::vector<int64_t>& tokens : file_tokens) tokens.assign(input_files, 0);
  }
  std::vector<PrepareShardSummary> shards;
  ResumePoint from[kSplits];
  int64_t next_shard[kSplits] = {0, 0};
  // Per input file, the tokens of each split in its complete shards.
  std::vector<int64_t> file_tokens[kSplits];
};

// One record on its way from the reader through an encoder to the writer.
struct PipelineRecord {
  std::string text;  // as read: a JSON Lines line or a plain-text document; emptied when encoded
  int32_t file = 0;
  bool json = false;
  int64_t line = 0;
  int64_t ordinal = 0;  // among all records of the inputs, in order: a resume position
  // Set by the encoder.
  int split = -1;  // 0 train, 1 val; -1 a bad record, for `reason`
  std::string reason;
  std::vector<int32_t> tokens;  // EOS appended, resume skip applied; empty: already in a shard
  int64_t skip_tokens = 0;      // the document's first tokens, left out: in a complete shard
};

struct WorkBatch {
  int64_t sequence = 0;
  std::vector<PipelineRecord> records;
  // The reader stopped after these records, for this reason; the writer rethrows it once they are
  // written, so an error is reported in input order whatever the thread count.
  std::exception_ptr failure;
};

// Leaves the reader's loop when the pipeline was stopped from the other side.
struct StopReading {};

// The reader, the encoders and the writer, joined by one lock. At most max_in_flight batches
// exist at once: the reader waits for the writer to retire one before it makes another. Each
// side waits on its own condition, so a change wakes only who can act on it (with more threads
// than cores, waking all of them costs a core a good part of its time).
class BatchPipeline {
 public:
  explicit BatchPipeline(int64_t max_in_flight) : max_in_flight_(max_in_flight) {}

  // Reader: false when the pipeline was aborted.
  bool submit(WorkBatch&& batch) {
    std::unique_lock lock(mutex_);
    room_.wait(lock, [&] { return in_flight_ < max_in_flight_ || aborted_; });
    if (aborted_) return false;
    batch.sequence = submitted_++;
    ++in_flight_;
    queue_.push_back(std::move(batch));
    work_.notify_one();
    return true;
  }
  void finish_input() {
    std::lock_guard lock(mutex_);
    input_done_ = true;
    work_.notify_all();
    finished_changed_.notify_all();
  }
  // Encoder: false when there is no more work.
  bool take(WorkBatch* batch) {
    std::unique_lock lock(mutex_);
    work_.wait(lock, [&] { return !queue_.empty() || input_done_ || aborted_; });
    if (aborted_ || queue_.empty()) return false;
    *batch = std::move(queue_.front());
    queue_.pop_front();
    return true;
  }
  void done(WorkBatch&& batch) {
    std::lock_guard lock(mutex_);
    const int64_t sequence = batch.sequence;
    finished_.emplace(sequence, std::move(batch));
    if (sequence == written_) finished_changed_.notify_one();  // the one the writer waits for
  }
  // Writer: the next batch in input order; false at the end. Waits at most `timeout_s`, setting
  // *timed_out, so the caller can print progress.
  bool next(WorkBatch* batch, double timeout_s, bool* timed_out) {
    std::unique_lock lock(mutex_);
    *timed_out = !finished_changed_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] {
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
    room_.notify_one();
  }
  void abort(std::exception_ptr failure) {
    std::lock_guard lock(mutex_);
    if (!failure_) failure_ = failure;
    aborted_ = true;
    room_.notify_all();
    work_.notify_all();
    finished_changed_.notify_all();
  }
  std::exception_ptr failure() {
    std::lock_guard lock(mutex_);
    return failure_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable room_, work_, finished_changed_;  // reader, encoders, writer
  std::deque<WorkBatch> queue_;
  std::map<int64_t, WorkBatch> finished_;
  int64_t max_in_flight_, in_flight_ = 0, submitted_ = 0, written_ = 0;
  bool input_done_ = false, aborted_ = false;
  std::exception_ptr failure_;
};

struct ReadTimes {
  double read = 0, decompress = 0, total = 0;
};

// Reads every input in order, handing each record to `on_record` with its file's index, and fills
// in per file what reading learns (compression, format, bytes; a file that cannot be opened or
// whose compressed stream breaks off is an error, or under --on-bad-record skip a warning and a
// skipped record of that file).
class CorpusReader {
 public:
  CorpusReader(const PrepareOptions& options, const std::vector<std::string>& paths)
      : options_(options), paths_(paths) {}

  void read(std::vector<PrepareFileSummary>* files,
            const std::function<void(InputRecord&&, int32_t file)>& on_record) {
    const double start = now_s();
    RecordReaderOptions reader_options;
    reader_options.format = options_.format;
    for (size_t i = 0; i < paths_.size(); ++i) {
      PrepareFileSummary& file = (*files)[i];
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
      RecordReaderStats stats;
      try {
        read_records(
            *stream, paths_[i], reader_options,
            [&](InputRecord&& record) { on_record(std::move(record), static_cast<int32_t>(i)); },
            &stats);
      } catch (const Error& e) {
        if (options_.on_bad_record == BadRecordPolicy::error) throw;
        warn(std::string("prepare: skipping the rest of ") + e.what());
        ++file.skipped_records;
      }
      file.format = input_format_name(stats.format);
      file.decompressed_bytes = stats.decompressed_bytes;
      times_.read += stream->read_seconds();
      times_.decompress += stream->decompress_seconds();
      files_done_bytes_ += file.bytes;
      current_ = nullptr;
      warn_if_not_text(paths_[i], stats);
    }
    times_.total = now_s() - start;
  }

  // Bytes of the input files consumed so far (approximate while a file is being read).
  int64_t bytes_done() const {
    const ByteStream* stream = current_;
    return files_done_bytes_ + (stream ? stream->file_bytes_read() : 0);
  }
  const ReadTimes& times() const { return times_; }

 private:
  static void warn_if_not_text(const std::string& path, const RecordReaderStats& s) {
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

// The per-file entries of the summary, with what is known before reading.
std::vector<PrepareFileSummary> file_entries(const std::vector<std::string>& paths) {
  std::vector<PrepareFileSummary> files(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    files[i].path = paths[i];
    std::error_code ec;
    files[i].bytes = static_cast<int64_t>(fs::file_size(paths[i], ec));
  }
  return files;
}

// --on-bad-record for one bad record: under error, an Error naming it; under skip, a warning (for
// the first five of its file) and one more in *skipped, its file's count.
void handle_bad_record(const PrepareOptions& options, const BadRecord& record,
                       int64_t* skipped_in_file) {
  if (options.on_bad_record == BadRecordPolicy::error)
    throw error("prepare: ", record.describe(),
                "; fix the record, or give --on-bad-record skip to leave such records out");
  const int64_t skipped = ++*skipped_in_file;
  if (skipped <= 5) warn("prepare: skipping " + record.describe());
  if (skipped == 6) warn("prepare: " + record.path + ": more bad records; the summary counts them");
}

// Reads every record, in order and in batches of about kBatchTextBytes, numbering them, and
// hands each batch to `submit` (false: stop). A reading error is handed on as the failure of a
// last batch holding the records before it. Returns the seconds spent in `submit`.
double read_batches(CorpusReader& reader, std::vector<PrepareFileSummary>* files,
                    const std::function<bool(WorkBatch&&)>& submit) {
  WorkBatch batch;
  size_t batch_bytes = 0;
  int64_t ordinal = 0;
  double submit_seconds = 0;
  auto submit_timed = [&](WorkBatch&& full) {
    const double begin = now_s();
    const bool go_on = submit(std::move(full));
    submit_seconds += now_s() - begin;
    return go_on;
  };
  try {
    reader.read(files, [&](InputRecord&& record, int32_t file) {
      batch_bytes += record.text.size();
      PipelineRecord& next = batch.records.emplace_back();
      next.text = std::move(record.text);
      next.file = file;
      next.json = record.json;
      next.line = record.line;
      next.ordinal = ordinal++;
      if (batch_bytes >= kBatchTextBytes || batch.records.size() >= 8192) {
        if (!submit_timed(std::move(batch))) throw StopReading{};
        batch = WorkBatch{};
        batch_bytes = 0;
      }
    });
  } catch (const StopReading&) {
    return submit_seconds;
  } catch (...) {
    batch.failure = std::current_exception();
  }
  if (!batch.records.empty() || batch.failure) submit_timed(std::move(batch));
  return submit_seconds;
}

// One split's shards: tokens are cut into shards of exactly shard_tokens (the last shorter).
class SplitWriter {
 public:
  SplitWriter(int split, const fs::path& dir, int64_t shard_tokens, int64_t vocab_size,
              int64_t next_shard, std::vector<int64_t> file_tokens,
              std::function<void(PrepareShardSummary&&)> on_commit)
      : split_(split),
        dir_(dir),
        shard_tokens_(shard_tokens),
        vocab_size_(vocab_size),
        next_shard_(next_shard),
        file_tokens_(std::move(file_tokens)),
        on_commit_(std::move(on_commit)) {}

  // The tokens of the document of record `record` of input `file`, the first `skip` of which
  // are in a complete shard already.
  void write(const std::vector<int32_t>& tokens, int64_t record, int64_t skip, int32_t file) {
    size_t done = 0;
    while (done < tokens.size()) {
      if (!current_)
        current_ = std::make_unique<ShardWriter>((dir_ / shard_name(split_, next_shard_)).string(),
                                                 vocab_size_);
      const size_t room = static_cast<size_t>(shard_tokens_ - current_->num_tokens());
      const size_t take = std::min(room, tokens.size() - done);
      current_->append(tokens.data() + done, take);
      file_tokens_[static_cast<size_t>(file)] += static_cast<int64_t>(take);
      shard_file_tokens_[file] += static_cast<int64_t>(take);
      done += take;
      if (current_->num_tokens() == shard_tokens_) {
        if (done == tokens.size())
          commit(record + 1, 0);
        else
          commit(record, skip + static_cast<int64_t>(done));
      }
    }
  }
  void finish(int64_t end_record) {
    if (current_) commit(end_record, 0);
  }
  const std::vector<int64_t>& file_tokens() const { return file_tokens_; }

 private:
  void commit(int64_t end_record, int64_t end_offset) {
    PrepareShardSummary shard;
    shard.name = fs::path(current_->path()).filename().string();
    shard.split = kSplitNames[split_];
    shard.tokens = current_->num_tokens();
    shard.checksum = Checksum64::hex(current_->commit());
    shard.end_record = end_record;
    shard.end_offset = end_offset;
    shard.file_tokens = std::move(shard_file_tokens_);
    shard_file_tokens_.clear();
    current_.reset();
    ++next_shard_;
    on_commit_(std::move(shard));
  }

  int split_;
  fs::path dir_;
  int64_t shard_tokens_, vocab_size_, next_shard_;
  std::vector<int64_t> file_tokens_;              // per input file, in this split's shards
  std::map<int32_t, int64_t> shard_file_tokens_;  // per input file, in the current shard
  std::function<void(PrepareShardSummary&&)> on_commit_;
  std::unique_ptr<ShardWriter> current_;
};

nlohmann::json shard_json(const PrepareShardSummary& s) {
  return {{"name", s.name},
          {"split", s.split},
          {"tokens", s.tokens},
          {"checksum", s.checksum},
          {"end_record", s.end_record},
          {"end_offset", s.end_offset},
          {"file_tokens", s.file_tokens}};
}

PrepareShardSummary shard_from_json(const nlohmann::json& j) {
  PrepareShardSummary s;
  s.name = j.at("name").get<std::string>();
  s.split = j.at("split").get<std::string>();
  s.tokens = j.at("tokens").get<int64_t>();
  s.checksum = j.at("checksum").get<std::string>();
  s.end_record = j.at("end_record").get<int64_t>();
  s.end_offset = j.at("end_offset").get<int64_t>();
  s.file_tokens = j.at("file_tokens").get<std::map<int32_t, int64_t>>();
  return s;
}

// What the output depends on: a resume must see the same, or its shards would not join up.
nlohmann::json fingerprint(const PrepareOptions& options,
                           const std::vector<PrepareFileSummary>& files,
                           const std::string& tokenizer_hash) {
  nlohmann::json inputs = nlohmann::json::array();
  for (const PrepareFileSummary& file : files)
    inputs.push_back({{"path", fs::absolute(file.path).string()}, {"bytes", file.bytes}});
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
  std::vector<PrepareFileSummary> files = file_entries(paths);
  CorpusReader reader(options, paths);
  std::string text, reason;
  reader.read(&files, [&](InputRecord&& record, int32_t file) {
    const int64_t line = record.line;
    if (!record_document(record, options.text_field, &text, &reason)) {
      handle_bad_record(options, {paths[file], line, reason}, &files[file].skipped_records);
      return;
    }
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
  if (fs::equivalent(source, choice.path, ec)) return choice;
  write_file_atomically(choice.path, read_text_file(source));
  // A tokenizer.json takes its BOS and EOS from the tokenizer_config.json beside it: the copy
  // needs it too, or the shards' EOS would not be the one training and eval see.
  const fs::path config = fs::path(source).parent_path() / "tokenizer_config.json";
  const fs::path copied_config = out / "tokenizer_config.json";
  if (choice.path.ends_with(".json") && fs::exists(config))
    write_file_atomically(copied_config.string(), read_text_file(config.string()));
  else
    fs::remove(copied_config);
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

// progress.json's layout; a record of another one cannot be resumed from.
constexpr int kProgressVersion = 2;

// The complete shards an interrupted run left, checked against this run's options.
ResumeState load_resume_state(const fs::path& out, const nlohmann::json& expected,
                              size_t input_files) {
  ResumeState state(input_files);
  const fs::path progress = out / "progress.json";
  if (!fs::exists(progress)) return state;
  const nlohmann::json saved =
      nlohmann::json::parse(read_text_file(progress.string()), nullptr, false);
  if (!saved.is_object() || !saved.contains("fingerprint") || !saved.contains("shards"))
    throw error(progress.string(), " is not a prepare progress record; run without --resume");
  if (saved.value("version", 1) != kProgressVersion)
    throw error("prepare --resume: ", progress.string(), " was written by another version of ",
                "boostlm prepare, whose shards this one cannot continue; run without --resume");
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
    state.from[split] = {shard.end_record, shard.end_offset};
    ++state.next_shard[split];
    for (const auto& [file, tokens] : shard.file_tokens) {
      if (file < 0 || static_cast<size_t>(file) >= input_files)
        throw error(progress.string(), " counts tokens of input file ", file, " of ", input_files,
                    "; run without --resume");
      state.file_tokens[split][static_cast<size_t>(file)] += tokens;
    }
    state.shards.push_back(std::move(shard));
  }
  return state;
}

// What the writer counts per input file (the reader's counts are in the summary's entries).
struct FileCounts {
  int64_t documents = 0, skipped_records = 0;
};

// The encode and write stages of a preparation: encode_batch runs on any thread, write_batch on
// one, in input order.
class CorpusEncoder {
 public:
  CorpusEncoder(const PrepareOptions& options, const std::vector<std::string>& paths,
                const Tokenizer& tokenizer, const ResumeState& resume,
                std::vector<std::unique_ptr<SplitWriter>>& writers)
      : options_(options),
        paths_(paths),
        tokenizer_(tokenizer),
        eos_(tokenizer.eos_id()),
        resume_(resume),
        writers_(writers),
        file_counts_(paths.size()) {}

  // Parses (JSON Lines), splits and tokenizes each record of the batch, adding the seconds of
  // parsing and of tokenizing to the two counters.
  void encode_batch(WorkBatch& batch, double* parse_seconds, double* tokenize_seconds) const {
    const double begin = now_s();
    std::vector<std::string> documents(batch.records.size());
    for (size_t i = 0; i < batch.records.size(); ++i) {
      PipelineRecord& record = batch.records[i];
      InputRecord input{std::move(record.text), record.line, record.json};
      record.text = std::string();
      if (!record_document(input, options_.text_field, &documents[i], &record.reason)) continue;
      record.split =
          document_goes_to_val(documents[i], options_.val_fraction, options_.seed) ? 1 : 0;
    }
    const double parsed = now_s();
    for (size_t i = 0; i < batch.records.size(); ++i) {
      PipelineRecord& record = batch.records[i];
      if (record.split < 0) continue;
      const ResumePoint& from = resume_.from[record.split];
      if (record.ordinal < from.record) continue;  // in a complete shard: counted, not encoded
      record.tokens = tokenizer_.encode(documents[i]);
      record.tokens.push_back(eos_);
      if (record.ordinal == from.record) {
        record.skip_tokens =
            static_cast<int64_t>(std::min<size_t>(record.tokens.size(), from.offset));
        record.tokens.erase(
            record.tokens.begin(),
            record.tokens.begin() + static_cast<std::ptrdiff_t>(record.skip_tokens));
      }
    }
    *parse_seconds += parsed - begin;
    *tokenize_seconds += now_s() - parsed;
  }

  // Counts the batch's documents and bad records and appends its tokens to the shards; then
  // rethrows the reader's failure that ended the batch, if one did.
  void write_batch(WorkBatch& batch) {
    const double begin = now_s();
    for (const PipelineRecord& record : batch.records) {
      FileCounts& counts = file_counts_[static_cast<size_t>(record.file)];
      records_ = record.ordinal + 1;
      if (record.split < 0) {
        handle_bad_record(options_, {paths_[record.file], record.line, record.reason},
                          &counts.skipped_records);
        continue;
      }
      ++counts.documents;
      ++documents_[record.split];
      writers_[record.split]->write(record.tokens, record.ordinal, record.skip_tokens, record.file);
      tokens_written_ += static_cast<int64_t>(record.tokens.size());
    }
    write_seconds_ += now_s() - begin;
    if (batch.failure) std::rethrow_exception(batch.failure);
  }

  const std::vector<FileCounts>& file_counts() const { return file_counts_; }
  int64_t documents(int split) const { return documents_[split]; }
  int64_t documents() const { return documents_[0] + documents_[1]; }
  int64_t records() const { return records_; }
  int64_t tokens_written() const { return tokens_written_; }
  double write_seconds() const { return write_seconds_; }

 private:
  const PrepareOptions& options_;
  const std::vector<std::string>& paths_;
  const Tokenizer& tokenizer_;
  const int32_t eos_;
  const ResumeState& resume_;
  std::vector<std::unique_ptr<SplitWriter>>& writers_;
  std::vector<FileCounts> file_counts_;
  int64_t documents_[kSplits] = {0, 0};
  int64_t records_ = 0, tokens_written_ = 0;
  double write_seconds_ = 0;
};

// Seconds of CPU (user and system) this process has used.
double process_cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * t.tv_usec; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
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
                      {"format", f.format},
                      {"bytes", f.bytes},
                      {"decompressed_bytes", f.decompressed_bytes},
                      {"documents", f.documents},
                      {"tokens", f.tokens},
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

namespace {

// What prepare writes into its output directory: shards, records, the tokenizer and its sample.
bool is_prepare_output(const std::string& name) {
  const bool shard = (name.rfind("train", 0) == 0 || name.rfind("val", 0) == 0) &&
                     name.find(".bin") != std::string::npos;
  return shard || name == "meta.json" || name.rfind("progress.json", 0) == 0 ||
         name.rfind("tokenizer", 0) == 0;
}

// A preparation is never replaced or read by accident: an --out that holds one needs --overwrite
// (or --resume), no input may lie inside --out (a rerun would read its own shards and meta.json,
// and deleting them first would destroy them), and an input given twice would double its data.
void check_inputs_and_output(const PrepareOptions& options, const std::vector<std::string>& paths,
                             const fs::path& out) {
  std::error_code ec;
  const fs::path out_abs = fs::weakly_canonical(out, ec);
  auto inside_out = [&](const std::string& path) {
    const fs::path p = fs::weakly_canonical(path, ec);
    const auto [o, _] = std::mismatch(out_abs.begin(), out_abs.end(), p.begin(), p.end());
    return o == out_abs.end();
  };
  for (const std::string& argument : options.input_files)
    if (fs::is_directory(argument, ec) && inside_out(argument))
      throw error("prepare: the input directory ", argument, " is the output directory --out ",
                  out.string(), " or lies inside it: prepare would read its own shards; write to ",
                  "another --out");
  std::vector<std::pair<std::string, std::string>> seen;  // canonical path, as given
  for (const std::string& path : paths) {
    if (inside_out(path))
      throw error("prepare: the input ", path, " lies inside the output directory --out ",
                  out.string(), ": prepare would read its own output; write to another --out or ",
                  "move the input");
    const std::string canonical = fs::weakly_canonical(path, ec).string();
    for (const auto& [c, given] : seen)
      if (c == canonical)
        throw error("prepare: the input ", path, " is given twice (also as ", given,
                    "): its documents would be counted twice; give each input once");
    seen.emplace_back(canonical, path);
  }
  if (options.resume || options.overwrite || !fs::is_directory(out, ec)) return;
  std::string found;
  if (fs::exists(out / "meta.json", ec)) {
    found = "a preparation (meta.json)";
  } else if (fs::exists(out / "progress.json", ec)) {
    found = "an interrupted preparation (progress.json)";
  } else {
    for (const auto& entry : fs::directory_iterator(out, ec)) {
      const std::string name = entry.path().filename().string();
      if (is_prepare_output(name) && name.find(".bin") != std::string::npos) {
        found = "shards (" + name + ")";
        break;
      }
    }
  }
  if (!found.empty())
    throw error("prepare: --out ", out.string(), " already holds ", found,
                ": give --overwrite to replace it, --resume to continue an interrupted one, or "
                "another --out");
}

// After a failure, what this run wrote goes (shards, records, a trained or copied tokenizer), and
// the directory too if this run made it and it is left empty. An interrupted run (a signal) does
// not come here: its shards and progress.json stay for --resume.
void remove_failed_output(const fs::path& out, bool created) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(out, ec))
    if (is_prepare_output(entry.path().filename().string())) fs::remove(entry.path(), ec);
  if (created && fs::is_empty(out, ec)) fs::remove(out, ec);
}

PrepareSummary prepare_into(const PrepareOptions& options, const std::vector<std::string>& paths,
                            const fs::path& out);

}  // namespace

PrepareSummary prepare_corpus(const PrepareOptions& options) {
  check_options(options);
  const std::vector<std::string> paths = expand_inputs(options.input_files);
  const fs::path out(options.output_dir);
  check_inputs_and_output(options, paths, out);
  std::error_code ec;
  const bool created = !fs::exists(out, ec);
  fs::create_directories(out);
  try {
    return prepare_into(options, paths, out);
  } catch (...) {
    if (!options.resume) remove_failed_output(out, created);
    throw;
  }
}

namespace {

PrepareSummary prepare_into(const PrepareOptions& options, const std::vector<std::string>& paths,
                            const fs::path& out) {
  const double start = now_s();
  const double start_cpu = process_cpu_seconds();

  PrepareSummary summary;
  summary.meta_path = (out / "meta.json").string();
  summary.files = file_entries(paths);
  for (const PrepareFileSummary& file : summary.files) summary.input_bytes += file.bytes;

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
  summary.tokenizer_seconds = now_s() - start;
  summary.tokenizer_path = choice.path;
  summary.trained_tokenizer = choice.trained;
  const Tokenizer tokenizer = Tokenizer::load(choice.path);
  summary.vocab_size = tokenizer.vocab_size();

  const nlohmann::json print =
      fingerprint(options, summary.files, tokenizer_identity(choice.path).hash);
  ResumeState resume(paths.size());
  if (options.resume) {
    resume = load_resume_state(out, print, paths.size());
    summary.resumed = !resume.shards.empty();
    std::vector<std::string> keep = {fs::path(choice.path).filename().string(), "progress.json"};
    for (const PrepareShardSummary& shard : resume.shards) keep.push_back(shard.name);
    remove_earlier_output(out, keep);
  }
  summary.shards = resume.shards;

  std::vector<std::unique_ptr<SplitWriter>> writers;
  auto record_progress = [&](PrepareShardSummary&& shard) {
    summary.shards.push_back(std::move(shard));
    nlohmann::json shards = nlohmann::json::array();
    for (const PrepareShardSummary& s : summary.shards) shards.push_back(shard_json(s));
    const nlohmann::json record = {
        {"version", kProgressVersion}, {"fingerprint", print}, {"shards", shards}};
    write_file_atomically(progress.string(), record.dump(1) + "\n");
  };
  for (int split = 0; split < kSplits; ++split)
    writers.push_back(std::make_unique<SplitWriter>(split, out, options.shard_tokens,
                                                    summary.vocab_size, resume.next_shard[split],
                                                    resume.file_tokens[split], record_progress));

  CorpusReader reader(options, paths);
  CorpusEncoder encoder(options, paths, tokenizer, resume, writers);
  const double write_start = now_s();
  double last_progress = write_start;
  auto show_progress = [&](bool final_line) {
    if (!options.progress || (!final_line && now_s() - last_progress < 1.0)) return;
    last_progress = now_s();
    print_progress(final_line ? summary.input_bytes : reader.bytes_done(), summary.input_bytes,
                   encoder.documents(), encoder.tokens_written(), last_progress - write_start,
                   final_line);
  };
  // Per encoding thread: seconds parsing, seconds tokenizing.
  std::vector<std::array<double, 2>> encode_seconds(static_cast<size_t>(options.threads));
  auto encode_timed = [&](WorkBatch& batch, int thread) {
    std::array<double, 2>& seconds = encode_seconds[static_cast<size_t>(thread)];
    encoder.encode_batch(batch, &seconds[0], &seconds[1]);
  };
  double submit_seconds = 0;  // the reader's time handing batches on

  if (options.threads == 1) {
    // One thread does it all, in turn: what one core does, the baseline of the scaling.
    std::exception_ptr failure;
    submit_seconds = read_batches(reader, &summary.files, [&](WorkBatch&& batch) {
      try {
        encode_timed(batch, 0);
        encoder.write_batch(batch);
        show_progress(false);
        return true;
      } catch (...) {
        failure = std::current_exception();
        return false;
      }
    });
    if (failure) std::rethrow_exception(failure);
  } else {
    // A reader thread, `threads` encoders and this thread writing in input order. The reader
    // and the writer are light (decompressing, cutting lines; copying tokens), so the encoders
    // keep the cores busy.
    BatchPipeline pipeline(kBatchesInFlightPerThread * options.threads + 2);
    std::thread read_thread([&] {
      try {
        submit_seconds = read_batches(reader, &summary.files, [&](WorkBatch&& batch) {
          return pipeline.submit(std::move(batch));
        });
        pipeline.finish_input();
      } catch (...) {
        pipeline.abort(std::current_exception());
      }
    });
    std::vector<std::thread> encoders;
    for (int t = 0; t < options.threads; ++t) {
      encoders.emplace_back([&, t] {
        try {
          WorkBatch batch;
          while (pipeline.take(&batch)) {
            encode_timed(batch, t);
            pipeline.done(std::move(batch));
          }
        } catch (...) {
          pipeline.abort(std::current_exception());
        }
      });
    }
    try {
      WorkBatch batch;
      bool timed_out = false;
      for (;;) {
        const bool got = pipeline.next(&batch, 0.5, &timed_out);
        show_progress(false);
        if (!got) {
          if (timed_out) continue;
          break;
        }
        encoder.write_batch(batch);
        pipeline.retire();
      }
    } catch (...) {
      pipeline.abort(std::current_exception());
    }
    read_thread.join();
    for (std::thread& thread : encoders) thread.join();
    if (std::exception_ptr failure = pipeline.failure()) std::rethrow_exception(failure);
  }
  show_progress(true);

  const int64_t total_documents = encoder.documents();
  if (total_documents == 0) throw error("prepare: the input files contain no text");
  check_enough_documents(total_documents, options.val_fraction);
  if (options.val_fraction > 0 && encoder.documents(1) == 0)
    throw error("prepare: no document of ", total_documents,
                " fell in the validation split at --val-fraction ", options.val_fraction,
                " (the split hashes each document's text); give more documents, another --seed, or "
                "--val-fraction 0");
  for (int split = 0; split < kSplits; ++split) writers[split]->finish(encoder.records());

  summary.train_documents = encoder.documents(0);
  summary.val_documents = encoder.documents(1);
  for (const PrepareShardSummary& shard : summary.shards)
    (shard.split == "val" ? summary.val_tokens : summary.train_tokens) += shard.tokens;
  for (size_t i = 0; i < summary.files.size(); ++i) {
    PrepareFileSummary& file = summary.files[i];
    file.documents = encoder.file_counts()[i].documents;
    file.skipped_records += encoder.file_counts()[i].skipped_records;
    file.tokens = writers[0]->file_tokens()[i] + writers[1]->file_tokens()[i];
    summary.decompressed_bytes += file.decompressed_bytes;
    summary.skipped_records += file.skipped_records;
  }
  const ReadTimes& times = reader.times();
  summary.read_seconds = times.read;
  summary.decompress_seconds = times.decompress;
  summary.cut_seconds = std::max(0.0, times.total - times.read - times.decompress - submit_seconds);
  for (const std::array<double, 2>& seconds : encode_seconds) {
    summary.parse_seconds += seconds[0];
    summary.encode_seconds += seconds[1];
  }
  summary.write_seconds = encoder.write_seconds();
  write_meta(summary, options, tokenizer);
  summary.total_seconds = now_s() - start;
  summary.cpu_seconds = process_cpu_seconds() - start_cpu;
  return summary;
}

}  // namespace

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
