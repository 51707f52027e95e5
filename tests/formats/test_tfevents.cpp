// TensorBoard event files: CRC-32C against RFC 3720's vectors, TFRecord framing read back, and
// corruption found by the CRCs. (That TensorBoard's own readers accept the files is
// tests/cli/test_tensorboard.sh's part: protoc and Python's google.protobuf read a run's file.)
#include "formats/tfevents.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "core/error.h"

namespace boostlm {
namespace {

// RFC 3720, appendix B.4: the iSCSI CRC (CRC-32C) of three 32-byte patterns.
TEST(TfEvents, Crc32cMatchesRfc3720) {
  unsigned char bytes[32];
  std::memset(bytes, 0, sizeof bytes);
  EXPECT_EQ(crc32c(bytes, sizeof bytes), 0x8a9136aau);
  std::memset(bytes, 0xff, sizeof bytes);
  EXPECT_EQ(crc32c(bytes, sizeof bytes), 0x62a8ab43u);
  std::iota(bytes, bytes + sizeof bytes, 0);
  EXPECT_EQ(crc32c(bytes, sizeof bytes), 0x46dd794eu);
  // Continuing a sum over a split input gives the sum of the whole.
  EXPECT_EQ(crc32c(bytes + 10, 22, crc32c(bytes, 10)), 0x46dd794eu);
}

TEST(TfEvents, MaskRotatesAndOffsets) {
  const char data[] = "brain.Event:2";
  const uint32_t crc = crc32c(data, 13);
  EXPECT_EQ(masked_crc32c(data, 13), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(TfEvents, RecordsReadBack) {
  const std::string a = file_version_event(1.5), b = scalars_event(2.0, 7, {{"loss/train", 3.25f}});
  const std::vector<std::string> read = read_tfrecords(tfrecord(a) + tfrecord(b), "f");
  ASSERT_EQ(read.size(), 2u);
  EXPECT_EQ(read[0], a);
  EXPECT_EQ(read[1], b);
  // The framing: 8 bytes of length, 4 of its CRC, the data, 4 of its CRC.
  EXPECT_EQ(tfrecord(a).size(), a.size() + 16);
}

// The version event's bytes, worked by hand from the wire format: key 0x09 (field 1, fixed64)
// and the double; key 0x1a (field 3, length-delimited), length 13, the text.
TEST(TfEvents, FileVersionEventBytes) {
  std::string expected = "\x09";
  const double wall_time = 1.5;
  expected.append(reinterpret_cast<const char*>(&wall_time), 8);
  expected += "\x1a\x0d" "brain.Event:2";
  EXPECT_EQ(file_version_event(1.5), expected);
}

// Every single flipped byte of a record is caught: in the length by the length's CRC, in the data
// by the data's, in either CRC by the mismatch it makes.
TEST(TfEvents, FlippedByteFailsCrc) {
  const std::string record = tfrecord(scalars_event(2.0, 7, {{"loss/train", 3.25f}}));
  for (size_t i = 0; i < record.size(); ++i) {
    std::string corrupt = record;
    corrupt[i] = static_cast<char>(corrupt[i] ^ 0x10);
    EXPECT_THROW(read_tfrecords(corrupt, "f"), Error) << "byte " << i;
  }
  EXPECT_THROW(read_tfrecords(record.substr(0, record.size() - 1), "f"), Error);
}

}  // namespace
}  // namespace boostlm
