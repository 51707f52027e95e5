// The safetensors reader refuses every malformed header with a message naming the tensor, and
// reports non-finite weights instead of loading them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/safetensors.h"

namespace boostlm {
namespace {

// A file image: the 8-byte header length, the header, then `data_bytes` bytes of 0x00.
std::string image(const nlohmann::json& header, size_t data_bytes) {
  const std::string text = header.dump();
  const uint64_t size = text.size();
  std::string out(reinterpret_cast<const char*>(&size), 8);
  return out + text + std::string(data_bytes, '\0');
}

nlohmann::json tensor(const std::string& dtype, std::vector<int64_t> shape, size_t begin,
                      size_t end) {
  return {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, end}}};
}

// The message of the Error that reading `bytes` throws ("" if none).
std::string error_of(const std::string& bytes) {
  try {
    SafetensorsReader reader(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                             "t.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, AcceptsContiguousTensorsInAnyKeyOrder) {
  // "b" comes first in the data but second in the (sorted) JSON object.
  const nlohmann::json header = {{"a", tensor("F32", {2}, 8, 16)},
                                 {"b", tensor("BF16", {4}, 0, 8)}};
  EXPECT_EQ(error_of(image(header, 16)), "");
}

TEST(Safetensors, RefusesOverlappingTensors) {
  const nlohmann::json header = {{"a", tensor("F32", {2}, 0, 8)}, {"b", tensor("F32", {2}, 4, 12)}};
  const std::string message = error_of(image(header, 12));
  EXPECT_NE(message.find("tensor 'b' (bytes 4..12) overlaps tensor 'a'"), std::string::npos)
      << message;
}

TEST(Safetensors, RefusesAGapBetweenTensors) {
  const nlohmann::json header = {{"a", tensor("F32", {1}, 0, 4)}, {"b", tensor("F32", {1}, 8, 12)}};
  const std::string message = error_of(image(header, 12));
  EXPECT_NE(message.find("tensor 'b' starts at byte 8, leaving a gap of 4 bytes after tensor 'a'"),
            std::string::npos)
      << message;
}

TEST(Safetensors, RefusesBytesNoTensorDescribes) {
  const nlohmann::json header = {{"a", tensor("F32", {1}, 0, 4)}};
  EXPECT_NE(error_of(image(header, 8)).find("4 bytes after the last tensor"), std::string::npos);
}

TEST(Safetensors, RefusesATensorBeyondTheDataSection) {
  const nlohmann::json header = {{"a", tensor("F32", {4}, 0, 16)}};
  const std::string message = error_of(image(header, 12));
  EXPECT_NE(message.find("tensor 'a' lies outside the file"), std::string::npos) << message;
}

TEST(Safetensors, RefusesASizeThatDisagreesWithShapeAndDtype) {
  // 8 bytes hold two F32 values or four BF16 ones, not three of either.
  const std::string message = error_of(image({{"w", tensor("F32", {3}, 0, 8)}}, 8));
  EXPECT_NE(message.find("tensor 'w' has 8 bytes, but shape [3] of F32 needs 12"),
            std::string::npos)
      << message;
  // The same for a dtype boostlm does not read: the check needs only the element size.
  EXPECT_NE(error_of(image({{"i", tensor("I64", {2}, 0, 8)}}, 8)).find("needs 16"),
            std::string::npos);
}

TEST(Safetensors, RefusesNegativeOrOverflowingShapes) {
  EXPECT_NE(error_of(image({{"w", tensor("F32", {-1, -4}, 0, 16)}}, 16))
                .find("tensor 'w' has an impossible shape [-1, -4]"),
            std::string::npos);
  const int64_t big = int64_t{1} << 40;
  EXPECT_NE(error_of(image({{"w", tensor("F32", {big, big}, 0, 0)}}, 0)).find("impossible shape"),
            std::string::npos);
}

// Dimensions and offsets that are not whole numbers within 64 bits are refused before any
// conversion (found by fuzz_safetensors: a 75-digit dimension parses as a float, and converting it
// to int64 was undefined behaviour).
TEST(Safetensors, RefusesDimensionsAndOffsetsThatAreNotWholeNumbers) {
  nlohmann::json w = tensor("F32", {1}, 0, 4);
  w["shape"] = nlohmann::json::parse("[2444444444444444444444444444444444444444444444444400002]");
  EXPECT_NE(error_of(image({{"w", w}}, 4))
                .find("tensor 'w' has a shape that is not a list of whole numbers"),
            std::string::npos);
  w["shape"] = {1.5};
  EXPECT_NE(error_of(image({{"w", w}}, 4)).find("not a list of whole numbers"), std::string::npos);
  w["shape"] = {uint64_t{1} << 63};  // above int64's range
  EXPECT_NE(error_of(image({{"w", w}}, 4)).find("not a list of whole numbers"), std::string::npos);
  w = tensor("F32", {1}, 0, 4);
  w["data_offsets"] = {-4, 0};
  EXPECT_NE(
      error_of(image({{"w", w}}, 4)).find("tensor 'w' has data_offsets that are not [begin, end]"),
      std::string::npos);
  w["data_offsets"] = {0.0, 4.0};
  EXPECT_NE(error_of(image({{"w", w}}, 4)).find("data_offsets that are not [begin, end]"),
            std::string::npos);
}

TEST(Safetensors, NamesAnUnknownDtypeAndItsTensor) {
  const std::string message = error_of(image({{"w", tensor("F33", {1}, 0, 4)}}, 4));
  EXPECT_NE(message.find("tensor 'w' has unknown dtype 'F33'"), std::string::npos) << message;
}

TEST(Safetensors, NamesAReadableButUnsupportedDtypeAtRead) {
  const std::string bytes = image({{"w", tensor("F64", {2}, 0, 16)}}, 16);
  SafetensorsReader reader(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                           "t.safetensors");
  float out[2];
  try {
    reader.read("w", {2}, out);
    ADD_FAILURE() << "an F64 tensor was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'w' has dtype F64"), std::string::npos)
        << e.what();
  }
}

// F16 (Hugging Face checkpoints) is widened exactly, and checked for non-finite values as the
// other dtypes are: 1.0, -2.0, inf.
TEST(Safetensors, ReadsF16AndReportsItsNonFiniteValues) {
  std::string bytes = image({{"w", tensor("F16", {3}, 0, 6)}}, 6);
  const uint16_t values[3] = {0x3c00, 0xc000, 0x7c00};
  std::memcpy(bytes.data() + bytes.size() - 6, values, 6);
  SafetensorsReader reader(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                           "t.safetensors");
  float out[3];
  try {
    reader.read("w", {3}, out);
    ADD_FAILURE() << "an inf was loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'w' holds 1 non-finite"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
}

TEST(Safetensors, ReportsNonFiniteValuesWithTheirCount) {
  std::string bytes = image({{"w", tensor("F32", {4}, 0, 16)}}, 16);
  const float values[4] = {1.0f, std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::infinity(), 2.0f};
  std::memcpy(bytes.data() + bytes.size() - 16, values, 16);
  SafetensorsReader reader(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                           "t.safetensors");
  float out[4];
  try {
    reader.read("w", {4}, out);
    ADD_FAILURE() << "NaN and inf were loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'w' holds 2 non-finite values"), std::string::npos)
        << e.what();
  }
}

TEST(Safetensors, RefusesAnAbsurdHeaderLengthBeforeParsing) {
  std::string bytes(8, '\0');
  const uint64_t size = ~uint64_t{0};
  std::memcpy(bytes.data(), &size, 8);
  EXPECT_NE(error_of(bytes + "{}").find("exceeds the file size"), std::string::npos);
}

}  // namespace
}  // namespace boostlm
