// Shards round-trip in both of llm.c's variants, and every malformed file is refused with a
// message naming the file and what is wrong.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "data/shard.h"
#include "data/test_util.h"

namespace boostlm {
namespace {

using test::expect_error;
using test::TempDir;

// A hand-built shard: header words (magic, version, count) followed by `token_bytes` raw bytes.
std::string shard_bytes(int32_t magic, int32_t version, int32_t count, size_t token_bytes) {
  std::vector<int32_t> header(kShardHeaderWords, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  bytes.append(token_bytes, '\x01');
  return bytes;
}

TEST(Shard, RoundTripsUint16Variant) {
  TempDir dir;
  const std::string path = dir.file("u16.bin");
  const std::vector<uint32_t> tokens = {0, 1, 2, 300, 50256, 65535, 7};
  write_shard(path, tokens, 65536);  // 65536 is the largest vocabulary that fits uint16
  const ShardHeader header = read_shard_header(path);
  EXPECT_EQ(header.magic, 20240520);
  EXPECT_EQ(header.version, 1);
  EXPECT_EQ(header.num_tokens, 7);
  EXPECT_EQ(header.bytes_per_token, 2);
  EXPECT_EQ(std::filesystem::file_size(path), 1024u + 2 * tokens.size());
  EXPECT_EQ(read_shard(path), std::vector<int32_t>(tokens.begin(), tokens.end()));
}

TEST(Shard, RoundTripsUint32VariantAbove65535) {
  TempDir dir;
  const std::string path = dir.file("u32.bin");
  const std::vector<uint32_t> tokens = {65536, 0, 128255, 65535, 100000};
  write_shard(path, tokens, 128256);  // llama3's vocabulary size
  const ShardHeader header = read_shard_header(path);
  EXPECT_EQ(header.magic, 20240801);
  EXPECT_EQ(header.version, 7);
  EXPECT_EQ(header.bytes_per_token, 4);
  EXPECT_EQ(std::filesystem::file_size(path), 1024u + 4 * tokens.size());
  EXPECT_EQ(read_shard(path), std::vector<int32_t>(tokens.begin(), tokens.end()));
}

TEST(Shard, HeaderIsLittleEndianLlmcLayout) {
  TempDir dir;
  const std::string path = dir.file("layout.bin");
  write_shard(path, {513, 2}, 1000);
  const std::string bytes = test::read_bytes(path);
  ASSERT_EQ(bytes.size(), 1024u + 4u);
  const unsigned char magic_le[4] = {0x88, 0xd8, 0x34, 0x01};  // 20240520 = 0x0134d888
  EXPECT_EQ(std::memcmp(bytes.data(), magic_le, 4), 0);
  EXPECT_EQ(bytes[4], 1);  // version
  EXPECT_EQ(bytes[8], 2);  // token count
  for (size_t i = 12; i < 1024; ++i) ASSERT_EQ(bytes[i], 0) << "header byte " << i;
  EXPECT_EQ(static_cast<unsigned char>(bytes[1024]), 0x01);  // 513 = 0x0201, little-endian
  EXPECT_EQ(static_cast<unsigned char>(bytes[1025]), 0x02);
}

TEST(Shard, WriteLeavesNoTemporaryFileAndReplacesAtomically) {
  TempDir dir;
  const std::string path = dir.file("s.bin");
  write_shard(path, {1, 2, 3}, 10);
  write_shard(path, {4, 5}, 10);
  EXPECT_EQ(read_shard(path), (std::vector<int32_t>{4, 5}));
  int entries = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    ++entries;
  }
  EXPECT_EQ(entries, 1);
}

TEST(Shard, WriteRefusesTokenOutsideVocabularyAndEmptyList) {
  TempDir dir;
  const std::string path = dir.file("bad.bin");
  expect_error([&] { write_shard(path, {1, 10, 2}, 10); }, {path, "token 10", "vocab_size=10"});
  expect_error([&] { write_shard(path, {}, 10); }, {path, "zero tokens"});
  EXPECT_FALSE(std::filesystem::exists(path));
  const std::string no_dir = dir.file("absent/s.bin");
  expect_error([&] { write_shard(no_dir, {1}, 10); }, {no_dir, "cannot create"});
}

TEST(Shard, RejectsMissingFile) {
  TempDir dir;
  const std::string path = dir.file("absent.bin");
  expect_error([&] { read_shard(path); }, {path, "cannot open"});
}

TEST(Shard, RejectsFileShorterThanHeader) {
  TempDir dir;
  const std::string path = dir.file("short.bin");
  test::write_bytes(path, shard_bytes(kShardMagicU16, 1, 3, 0).substr(0, 1000));
  expect_error([&] { read_shard(path); }, {path, "1000 bytes", "shorter than the 1024-byte"});
}

TEST(Shard, RejectsBadMagic) {
  TempDir dir;
  const std::string path = dir.file("magic.bin");
  test::write_bytes(path, shard_bytes(12345, 1, 3, 6));
  expect_error([&] { read_shard(path); }, {path, "bad magic 12345"});
}

TEST(Shard, RejectsUnknownVersion) {
  TempDir dir;
  const std::string path = dir.file("version.bin");
  test::write_bytes(path, shard_bytes(kShardMagicU16, 2, 3, 6));
  expect_error([&] { read_shard(path); }, {path, "unknown shard version 2"});
  test::write_bytes(path, shard_bytes(kShardMagicU32, 1, 3, 12));
  expect_error([&] { read_shard(path); }, {path, "unknown shard version 1", "expected 7"});
}

TEST(Shard, RejectsTruncatedFile) {
  TempDir dir;
  const std::string path = dir.file("truncated.bin");
  test::write_bytes(path, shard_bytes(kShardMagicU16, 1, 10, 2 * 10 - 1));
  expect_error([&] { read_shard(path); }, {path, "truncated", "10 tokens", "1043 bytes"});
}

TEST(Shard, RejectsTrailingBytes) {
  TempDir dir;
  const std::string path = dir.file("trailing.bin");
  test::write_bytes(path, shard_bytes(kShardMagicU32, 7, 2, 4 * 2 + 3));
  expect_error([&] { read_shard(path); }, {path, "3 trailing bytes"});
}

TEST(Shard, RejectsZeroTokens) {
  TempDir dir;
  const std::string path = dir.file("empty.bin");
  test::write_bytes(path, shard_bytes(kShardMagicU16, 1, 0, 0));
  expect_error([&] { read_shard(path); }, {path, "0 tokens", "at least one"});
}

TEST(Shard, TokenRangeHelpers) {
  const std::vector<int32_t> tokens = {3, 9, 0, 4};
  EXPECT_EQ(max_token(tokens), 9);
  check_tokens_below(tokens, 10, "t.bin");
  expect_error([&] { check_tokens_below(tokens, 9, "t.bin"); },
               {"t.bin", "token 9 at position 1", "[0, 9)"});
}

}  // namespace
}  // namespace boostlm
