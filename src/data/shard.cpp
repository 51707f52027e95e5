#include "data/shard.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "core/file_io.h"

namespace boostlm {

// The format is little-endian; we write and read memory images, which is only right on such hosts.
static_assert(std::endian::native == std::endian::little, "shard I/O assumes a little-endian host");

namespace {

constexpr int64_t kHeaderBytes = kShardHeaderWords * sizeof(int32_t);

void check_writable_tokens(const std::string& path, const std::vector<uint32_t>& tokens,
                           int64_t vocab_size) {
  if (tokens.empty()) throw error(path, ": refusing to write a shard with zero tokens");
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw error(path, ": ", tokens.size(), " tokens do not fit the header's int32 token count");
  }
  if (vocab_size <= 0 || vocab_size > (int64_t{1} << 31)) {
    throw error(path, ": vocab_size=", vocab_size, " is outside [1, 2^31]");
  }
  const uint32_t largest = *std::max_element(tokens.begin(), tokens.end());
  if (largest >= vocab_size) {
    throw error(path, ": token ", largest, " is not below vocab_size=", vocab_size);
  }
}

int bytes_per_token_of(const std::string& path, int32_t magic, int32_t version) {
  if (magic == kShardMagicU16) {
    if (version != kShardVersionU16) {
      throw error(path, ": unknown shard version ", version, " for magic ", magic, " (expected ",
                  kShardVersionU16, ")");
    }
    return 2;
  }
  if (magic == kShardMagicU32) {
    if (version != kShardVersionU32) {
      throw error(path, ": unknown shard version ", version, " for magic ", magic, " (expected ",
                  kShardVersionU32, ")");
    }
    return 4;
  }
  throw error(path, ": bad magic ", magic, ", not a token shard (expected ", kShardMagicU16, " or ",
              kShardMagicU32, ")");
}

template <typename Stored>
std::vector<int32_t> decode_tokens(const unsigned char* data, int64_t count,
                                   const std::string& path) {
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  for (size_t i = 0; i < tokens.size(); ++i) {
    Stored stored;
    std::memcpy(&stored, data + i * sizeof(Stored), sizeof(Stored));
    if constexpr (sizeof(Stored) == 4) {
      if (stored > static_cast<uint32_t>(std::numeric_limits<int32_t>::max())) {
        throw error(path, ": token ", stored, " at position ", i, " does not fit int32");
      }
    }
    tokens[i] = static_cast<int32_t>(stored);
  }
  return tokens;
}

}  // namespace

void write_shard(const std::string& path, const std::vector<uint32_t>& tokens, int64_t vocab_size) {
  check_writable_tokens(path, tokens, vocab_size);
  const bool narrow = vocab_size <= 65536;
  std::vector<int32_t> header(kShardHeaderWords, 0);
  header[0] = narrow ? kShardMagicU16 : kShardMagicU32;
  header[1] = narrow ? kShardVersionU16 : kShardVersionU32;
  header[2] = static_cast<int32_t>(tokens.size());
  AtomicFile file(path);  // a crash leaves the old file or the new one, never half of one
  file.write(header.data(), header.size() * sizeof(int32_t));
  if (narrow) {
    const std::vector<uint16_t> narrowed(tokens.begin(), tokens.end());
    file.write(narrowed.data(), narrowed.size() * sizeof(uint16_t));
  } else {
    file.write(tokens.data(), tokens.size() * sizeof(uint32_t));
  }
  file.commit();
}

ShardWriter::ShardWriter(std::string path, int64_t vocab_size)
    : path_(std::move(path)), vocab_size_(vocab_size) {
  if (vocab_size <= 0 || vocab_size > (int64_t{1} << 31))
    throw error(path_, ": vocab_size=", vocab_size, " is outside [1, 2^31]");
  temp_path_ = path_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw error(temp_path_, ": cannot create: ", std::strerror(errno));
  const std::vector<int32_t> placeholder(kShardHeaderWords, 0);
  write_fully(fd_, placeholder.data(), kHeaderBytes, temp_path_);
  buffer_.reserve(size_t{1} << 20);
}

ShardWriter::~ShardWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_path_.c_str());
  }
}

void ShardWriter::append(const int32_t* tokens, size_t count) {
  BOOSTLM_ASSERT_MSG(fd_ >= 0, "append after commit");
  if (num_tokens_ + static_cast<int64_t>(count) > std::numeric_limits<int32_t>::max())
    throw error(path_, ": more than 2^31-1 tokens do not fit the header's int32 token count");
  // One pass checks the range, one stores the tokens at their width (little-endian, as the
  // static_assert above makes memory order).
  for (size_t i = 0; i < count; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab_size_)
      throw error(path_, ": token ", tokens[i], " is not in [0, vocab_size=", vocab_size_, ")");
  const size_t used = buffer_.size();
  if (vocab_size_ <= 65536) {
    buffer_.resize(used + count * sizeof(uint16_t));
    unsigned char* out = buffer_.data() + used;
    for (size_t i = 0; i < count; ++i) {
      const auto narrow = static_cast<uint16_t>(tokens[i]);
      std::memcpy(out + i * sizeof narrow, &narrow, sizeof narrow);
    }
  } else {
    buffer_.resize(used + count * sizeof(int32_t));
    std::memcpy(buffer_.data() + used, tokens, count * sizeof(int32_t));
  }
  num_tokens_ += static_cast<int64_t>(count);
  if (buffer_.size() >= (size_t{1} << 20)) flush();
}

void ShardWriter::flush() {
  checksum_.update(buffer_.data(), buffer_.size());
  write_fully(fd_, buffer_.data(), buffer_.size(), temp_path_);
  buffer_.clear();
}

uint64_t ShardWriter::commit() {
  BOOSTLM_ASSERT_MSG(fd_ >= 0, "commit twice");
  if (num_tokens_ == 0) throw error(path_, ": refusing to write a shard with zero tokens");
  flush();
  std::vector<int32_t> header(kShardHeaderWords, 0);
  const bool narrow = vocab_size_ <= 65536;
  header[0] = narrow ? kShardMagicU16 : kShardMagicU32;
  header[1] = narrow ? kShardVersionU16 : kShardVersionU32;
  header[2] = static_cast<int32_t>(num_tokens_);
  if (::pwrite(fd_, header.data(), kHeaderBytes, 0) != kHeaderBytes)
    throw error(temp_path_, ": cannot write the shard header: ", std::strerror(errno));
  if (::fsync(fd_) != 0) throw error(temp_path_, ": cannot fsync: ", std::strerror(errno));
  ::close(fd_);
  fd_ = -1;
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(temp_path_.c_str());
    throw error(path_, ": cannot rename the finished shard into place: ", reason);
  }
  const auto parent = std::filesystem::path(path_).parent_path();
  fsync_directory(parent.empty() ? "." : parent.string());
  return checksum_.digest();
}

ShardHeader parse_shard_header(const unsigned char* bytes, size_t size, int64_t file_bytes,
                               const std::string& path) {
  if (file_bytes < kHeaderBytes) {
    throw error(path, ": file is ", file_bytes, " bytes, shorter than the ", kHeaderBytes,
                "-byte shard header");
  }
  std::array<int32_t, 3> words{};
  if (size < sizeof(words)) throw error(path, ": cannot read the shard header");
  std::memcpy(words.data(), bytes, sizeof(words));
  ShardHeader header;
  header.magic = words[0];
  header.version = words[1];
  header.num_tokens = words[2];
  header.bytes_per_token = bytes_per_token_of(path, header.magic, header.version);
  if (header.num_tokens <= 0) {
    throw error(path, ": header says ", header.num_tokens, " tokens; a shard needs at least one");
  }
  const int64_t expected = kHeaderBytes + header.num_tokens * header.bytes_per_token;
  if (file_bytes < expected) {
    throw error(path, ": truncated: header says ", header.num_tokens, " tokens (", expected,
                " bytes) but the file has ", file_bytes, " bytes");
  }
  if (file_bytes > expected) {
    throw error(path, ": ", file_bytes - expected, " trailing bytes after the ", header.num_tokens,
                " tokens the header announces");
  }
  return header;
}

ShardHeader read_shard_header(const std::string& path) {
  std::error_code ec;
  const auto file_bytes = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  if (ec) throw error(path, ": cannot open shard: ", ec.message());
  std::array<unsigned char, 3 * sizeof(int32_t)> words{};
  std::ifstream in(path, std::ios::binary);
  // A short file is reported by parse_shard_header, by its size.
  if (file_bytes >= kHeaderBytes && !in.read(reinterpret_cast<char*>(words.data()), words.size()))
    throw error(path, ": cannot read the shard header");
  return parse_shard_header(words.data(), words.size(), file_bytes, path);
}

std::vector<int32_t> parse_shard(const unsigned char* data, size_t size, const std::string& path) {
  const ShardHeader header = parse_shard_header(data, size, static_cast<int64_t>(size), path);
  const unsigned char* tokens = data + kHeaderBytes;
  if (header.bytes_per_token == 2) return decode_tokens<uint16_t>(tokens, header.num_tokens, path);
  return decode_tokens<uint32_t>(tokens, header.num_tokens, path);
}

std::vector<int32_t> read_shard(const std::string& path) {
  read_shard_header(path);  // a missing or short file is reported before it is mapped
  const MappedFile file(path);
  return parse_shard(file.data(), file.size(), path);
}

int32_t max_token(const std::vector<int32_t>& tokens) {
  BOOSTLM_ASSERT(!tokens.empty());
  return *std::max_element(tokens.begin(), tokens.end());
}

void check_tokens_below(const std::vector<int32_t>& tokens, int64_t vocab_size,
                        const std::string& source) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size) {
      throw error(source, ": token ", tokens[i], " at position ", i,
                  " is outside the vocabulary [0, ", vocab_size, ")");
    }
  }
}

}  // namespace boostlm
