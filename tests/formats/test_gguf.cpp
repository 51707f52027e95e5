// The GGUF writer byte for byte (GGUF v3, ggml docs/gguf.md) and ggml's tensor encodings. The
// whole export is read back by an independent reader in tests/gguf.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/file_io.h"
#include "formats/gguf_writer.h"

namespace boostlm {
namespace {

std::string le32(uint32_t v) {
  return std::string(reinterpret_cast<const char*>(&v), 4);
}
std::string le64(uint64_t v) {
  return std::string(reinterpret_cast<const char*>(&v), 8);
}
std::string gguf_string(const std::string& s) {
  return le64(s.size()) + s;
}

TEST(Gguf, FileLayoutByteForByte) {
  GgufWriter writer;  // alignment 32, written as general.alignment
  writer.add_string("general.architecture", "llama");
  writer.add_int32_array("a.b", {-1, 7});
  const std::vector<float> values = {1.0f, -2.0f, 0.5f};
  writer.add_tensor("t", {3}, GgmlType::f32,
                    [&] { return encode_ggml(values.data(), 1, 3, GgmlType::f32); });
  writer.add_tensor("u", {1}, GgmlType::f32,
                    [&] { return encode_ggml(values.data(), 1, 1, GgmlType::f32); });
  const std::string path = testing::TempDir() + "/layout.gguf";
  const uint64_t size = writer.write(path);

  std::string head = "GGUF" + le32(3) + le64(2) + le64(3);
  head += gguf_string("general.alignment") + le32(4) + le32(32);
  head += gguf_string("general.architecture") + le32(8) + gguf_string("llama");
  head += gguf_string("a.b") + le32(9) + le32(5) + le64(2) + le32(0xffffffffu) + le32(7);
  head += gguf_string("t") + le32(1) + le64(3) + le32(0) + le64(0);
  head += gguf_string("u") + le32(1) + le64(1) + le32(0) + le64(32);  // 12 bytes, padded to 32
  head.resize((head.size() + 31) / 32 * 32, '\0');
  std::string data(reinterpret_cast<const char*>(values.data()), 12);
  data.resize(32, '\0');
  data += std::string(reinterpret_cast<const char*>(values.data()), 4);
  data.resize(64, '\0');
  EXPECT_EQ(read_text_file(path), head + data);
  EXPECT_EQ(size, head.size() + data.size());
  std::filesystem::remove(path);
}

// ggml's quantize_row_q8_0_ref: d = max|x| / 127 (stored fp16), q = roundf(x / d).
TEST(Gguf, Q8_0BlockAsGgmlLaysItOut) {
  std::vector<float> x(64);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16) / 4;  // max |x| = 4
  // second block all zero: d = 0, q = 0
  const std::vector<unsigned char> out = encode_ggml(x.data(), 1, 64, GgmlType::q8_0);
  ASSERT_EQ(out.size(), 2u * 34u);
  uint16_t d;
  std::memcpy(&d, out.data(), 2);
  EXPECT_EQ(d, float_to_half(4.0f / 127.0f));
  for (int j = 0; j < 32; ++j) {
    const auto q = static_cast<int8_t>(out[2 + j]);
    // x·(127/4) = (j-16)·127/16; roundf rounds halves away from zero (never hit here: 127 odd)
    EXPECT_EQ(q, static_cast<int8_t>(std::roundf(x[j] * (1.0f / (4.0f / 127.0f))))) << j;
  }
  EXPECT_EQ(static_cast<int8_t>(out[2]), -127);  // x = -4: the block's extreme maps to ∓127
  for (int j = 34; j < 68; ++j) EXPECT_EQ(out[j], 0) << j;
}

TEST(Gguf, HalfAndBf16RoundToNearestEven) {
  const float x[2] = {1.0f + 1.0f / 2048, -3.0f};  // 1 + 2^-11: a tie in fp16, rounds to even (1)
  std::vector<unsigned char> h = encode_ggml(x, 1, 2, GgmlType::f16);
  uint16_t v[2];
  std::memcpy(v, h.data(), 4);
  EXPECT_EQ(v[0], 0x3c00);
  EXPECT_EQ(v[1], 0xc200);
  h = encode_ggml(x, 1, 2, GgmlType::bf16);
  std::memcpy(v, h.data(), 4);
  EXPECT_EQ(v[0], 0x3f80);
  EXPECT_EQ(v[1], 0xc040);
  EXPECT_EQ(ggml_bytes(GgmlType::q8_0, 64), 68);
  EXPECT_EQ(ggml_bytes(GgmlType::bf16, 5), 10);
}

}  // namespace
}  // namespace boostlm
