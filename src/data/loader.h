// Deterministic training batches from one token shard, in llm.c's windowing scheme.
//
// A window is B*T+1 consecutive tokens: inputs are its first B*T tokens and targets the same
// shifted by one, both [B, T] row-major. Indexing is circular: a window running past the end of
// the shard continues at token 0.
//
// Global window g = step * dp_size + dp_rank, so the dp_size ranks of one step together read
// dp_size consecutive windows (the global batch), each rank its own.
//  - shuffle off: window g starts at token g*B*T (mod N), i.e. the shard is read as an endless
//    cyclic stream cut into B*T chunks.
//  - shuffle on: an epoch is W = ceil(N / (B*T)) windows, one starting at every multiple of B*T,
//    so every token is an input once per epoch. Window g is slot g % W of epoch g / W, and the
//    slots of an epoch are a permutation of the W starts drawn from (seed, epoch) alone.
// Either way a batch is a pure function of (tokens, config, step); the step is all the state.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace boostlm {

struct LoaderConfig {
  int64_t batch_size = 1;  // B
  int64_t seq_len = 1;     // T
  int64_t dp_rank = 0;
  int64_t dp_size = 1;
  bool shuffle = false;
  uint64_t seed = 0;
};

struct Batch {
  int64_t batch_size = 0;
  int64_t seq_len = 0;
  std::vector<int32_t> inputs;   // [batch_size, seq_len]
  std::vector<int32_t> targets;  // [batch_size, seq_len], inputs shifted by one token
};

// What the trainer reads batches from: a single shard (DataLoader) or a list of them
// (ShardLoader). state() is saved in checkpoints; load_state() resumes exactly from it.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual Batch next() = 0;
  virtual nlohmann::json state() const = 0;
  virtual void load_state(const nlohmann::json& state) = 0;
};

class DataLoader : public BatchSource {
 public:
  // `source` names the tokens in error messages (usually the shard path). Throws Error for a bad
  // config or fewer than B*T+1 tokens.
  DataLoader(std::vector<int32_t> tokens, const LoaderConfig& config,
             std::string source = "tokens");
  static DataLoader from_shard(const std::string& path, const LoaderConfig& config);

  // The batch of the current step; advances the position by one step.
  Batch next() override;
  // The batch this rank reads at `step`, without moving the position.
  Batch batch_at(int64_t step);

  // The next step to read. Saving it and restoring it with set_position resumes bit-exactly.
  int64_t position() const { return step_; }
  void set_position(int64_t step);

  // The position plus what it is only meaningful with; load_state refuses a mismatch.
  nlohmann::json state() const override;
  void load_state(const nlohmann::json& state) override;

  // Token index where this rank's window of `step` starts.
  int64_t window_start(int64_t step);
  int64_t windows_per_epoch() const;
  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }
  const LoaderConfig& config() const { return config_; }

  // Window `index` in reading order from token 0 without shuffling (start index*B*T, circular):
  // the training windows of a no-shuffle, dp_size=1 run, and the evaluation windows.
  // `source` names the tokens in error messages.
  static Batch window(const std::vector<int32_t>& tokens, int64_t index, int64_t batch_size,
                      int64_t seq_len, const std::string& source = "tokens");
  // How many windows fit from token 0 without wrapping: floor((N - 1) / (B*T)).
  static int64_t full_windows(int64_t num_tokens, int64_t batch_size, int64_t seq_len);

 private:
  Batch read_window(int64_t start) const;
  const std::vector<int64_t>& epoch_permutation(int64_t epoch);

  std::vector<int32_t> tokens_;
  LoaderConfig config_;
  std::string source_;
  int64_t step_ = 0;
  int64_t cached_epoch_ = -1;  // epoch whose permutation is in permutation_
  std::vector<int64_t> permutation_;
};

// Batches from a list of memory-mapped shards (a prepared directory's train_NNNNNN.bin).
//
// A shard of N tokens holds W = floor((N-1) / (B*T)) windows, window w starting at token w*B*T
// (windows do not cross shards; a shard's last < B*T tokens are not read as inputs, and shards
// with W = 0 are passed over). An epoch reads every window of every shard once: the shards in
// the given order, or with shuffle in an order drawn from (seed, epoch), and within a shard its
// windows in order, or with shuffle in an order drawn from (seed, epoch, shard name).
//
// The global window stream is cut as DataLoader's: a step reads dp_size consecutive windows, rank
// r the r-th. The position is a cursor (epoch, shard in the epoch's order, window in the shard)
// that every rank keeps alike. state() records it with the epoch's shard order (names and token
// counts), so a run resumes exactly, on any DP size, and also when shards were added to the list
// since: the epoch under way keeps its saved order and the new shards join from the next one.
class ShardLoader : public BatchSource {
 public:
  // `vocab_size` > 0: each window's tokens are checked to be below it as they are read.
  // Throws Error (naming the file) for a bad shard or fewer than one window in all of them.
  ShardLoader(const std::vector<std::string>& shard_paths, const LoaderConfig& config,
              int64_t vocab_size = 0);
  ~ShardLoader() override;

  Batch next() override;
  nlohmann::json state() const override;
  void load_state(const nlohmann::json& state) override;

  int64_t num_tokens() const { return num_tokens_; }
  int64_t windows_per_epoch() const { return windows_per_epoch_; }
  int64_t windows_read() const { return windows_read_; }  // global windows, all ranks together

 private:
  struct Shard;
  struct Cursor {
    int64_t epoch = 0;
    std::vector<std::string> order;  // the epoch's shards, by name
    int64_t position = 0;            // index into order
    int64_t window = 0;              // window slot within that shard
  };
  void start_epoch(Cursor& cursor, int64_t epoch) const;
  void advance(Cursor& cursor, int64_t windows) const;
  Batch read(const Cursor& cursor);
  const Shard& shard(const std::string& name) const;
  int64_t window_start(const Shard& shard, int64_t epoch, int64_t slot);

  std::vector<std::unique_ptr<Shard>> shards_;
  std::map<std::string, size_t> by_name_;
  LoaderConfig config_;
  int64_t vocab_size_ = 0;
  int64_t num_tokens_ = 0, windows_per_epoch_ = 0, windows_read_ = 0;
  Cursor cursor_;
  // The window order of one (epoch, shard), cached: consecutive steps almost always share it.
  std::string cached_key_;
  std::vector<int64_t> cached_order_;
};

// The evaluation windows of a list of shards (a prepared directory's val_NNNNNN.bin in order, or
// one shard), read as one sequence: the first shard's floor((N-1) / (B*T)) windows, window w
// starting at its token w*B*T, then the next shard's, and so on. A window never crosses a shard
// (a shard's last < B*T tokens are not read as inputs; a shorter shard holds none) and no window
// is read twice. The windows are those a no-shuffle, dp_size=1 ShardLoader reads in its first
// epoch. Only the shards' headers are read up front; a shard is memory-mapped when one of its
// windows is first read, so a few windows of large shards bring only their own pages into memory.
class EvalWindows {
 public:
  // `vocab_size` > 0: each window's tokens are checked to be below it as they are read.
  // Throws Error (naming the file) for an empty list or a bad shard header.
  EvalWindows(const std::vector<std::string>& shard_paths, int64_t batch_size, int64_t seq_len,
              int64_t vocab_size = 0);
  ~EvalWindows();

  int64_t size() const { return windows_; }  // windows of all the shards together
  int64_t num_tokens() const { return num_tokens_; }
  int64_t num_shards() const { return static_cast<int64_t>(shards_.size()); }
  // The shards the first `windows` windows come from, in order (those holding at least one).
  std::vector<std::string> shards_holding(int64_t windows) const;
  // Window `index` of the sequence, 0 <= index < size(). Throws Error naming the file for a token
  // outside the vocabulary, or for a shard that changed since its header was read.
  Batch window(int64_t index);

 private:
  struct Shard;
  std::vector<std::unique_ptr<Shard>> shards_;
  int64_t batch_size_, seq_len_, vocab_size_;
  int64_t num_tokens_ = 0, windows_ = 0;
};

}  // namespace boostlm
