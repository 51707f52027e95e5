// Token shards in llm.c's on-disk format, so shards written by other tools load here and ours load
// there.
//
// Layout (llm.c's shard header): 256 little-endian int32 words, then the tokens.
//   header[0] = magic, header[1] = version, header[2] = number of tokens; the other words are 0.
// Two variants, chosen by the vocabulary size:
//   magic 20240520, version 1: uint16 tokens (llm.c's GPT-2 shards), for vocab_size <= 65536;
//   magic 20240801, version 7: uint32 tokens (llm.c's llama3 shards), for larger vocabularies.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/file_io.h"

namespace boostlm {

inline constexpr int kShardHeaderWords = 256;
inline constexpr int32_t kShardMagicU16 = 20240520;
inline constexpr int32_t kShardVersionU16 = 1;
inline constexpr int32_t kShardMagicU32 = 20240801;
inline constexpr int32_t kShardVersionU32 = 7;

struct ShardHeader {
  int32_t magic = 0;
  int32_t version = 0;
  int64_t num_tokens = 0;
  int bytes_per_token = 0;  // 2 or 4
};

// Writes `tokens` to `path`, choosing the uint16 variant when vocab_size <= 65536. The file is
// written under a temporary name, fsynced and renamed, so `path` never holds a partial shard.
// Throws Error if a token is >= vocab_size, the list is empty, or the file cannot be written.
void write_shard(const std::string& path, const std::vector<uint32_t>& tokens, int64_t vocab_size);

// Writes one shard as its tokens arrive, in bounded memory: the tokens stream to a temporary file
// behind a placeholder header, and commit() fills in the header, fsyncs and renames, so `path`
// never holds a partial shard (a writer destroyed uncommitted removes its temporary).
class ShardWriter {
 public:
  ShardWriter(std::string path, int64_t vocab_size);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Throws Error if a token is outside [0, vocab_size) or the shard would pass 2^31-1 tokens.
  void append(const int32_t* tokens, size_t count);
  int64_t num_tokens() const { return num_tokens_; }
  // Checksum64 of the token bytes after the header (what meta.json records). Throws Error for an
  // empty shard or a failed write.
  uint64_t commit();
  const std::string& path() const { return path_; }

 private:
  void flush();

  std::string path_, temp_path_;
  int64_t vocab_size_;
  int fd_ = -1;
  int64_t num_tokens_ = 0;
  std::vector<unsigned char> buffer_;
  Checksum64 checksum_;
};

// Reads and validates the header against the file size. Throws Error (naming the file) for a
// missing or short file, a bad magic or version, a token count that disagrees with the file size,
// or zero tokens.
ShardHeader read_shard_header(const std::string& path);

// Reads a whole shard (validated as read_shard_header does).
std::vector<int32_t> read_shard(const std::string& path);

// The same two over a shard image in memory; `source` names it in errors. parse_shard_header
// needs only the header's first words (`bytes` may be shorter than the file, whose full size is
// `file_bytes`).
ShardHeader parse_shard_header(const unsigned char* bytes, size_t size, int64_t file_bytes,
                               const std::string& source);
std::vector<int32_t> parse_shard(const unsigned char* data, size_t size, const std::string& source);

// Largest token of a non-empty list, so callers can check it against their vocabulary.
int32_t max_token(const std::vector<int32_t>& tokens);

// Throws Error naming `source` if any token is outside [0, vocab_size).
void check_tokens_below(const std::vector<int32_t>& tokens, int64_t vocab_size,
                        const std::string& source);

}  // namespace boostlm
