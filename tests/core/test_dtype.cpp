// float_as_decimal: what a float field is written as in JSON (issue 32: an exported config.json
// said "rms_norm_eps": 9.999999974752427e-07 for 1e-6).
#include <cstdio>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/dtype.h"

namespace boostlm {
namespace {

TEST(FloatAsDecimal, WritesTheShortestDecimalThatReadsBackAsTheFloat) {
  EXPECT_EQ(nlohmann::json(float_as_decimal(1e-6f)).dump(), "1e-06");
  EXPECT_EQ(nlohmann::json(float_as_decimal(1e-5f)).dump(), "1e-05");
  EXPECT_EQ(nlohmann::json(float_as_decimal(10000.0f)).dump(), "10000.0");
  EXPECT_EQ(nlohmann::json(float_as_decimal(0.1f)).dump(), "0.1");
  // What it replaces: the float widened exactly.
  EXPECT_EQ(nlohmann::json(static_cast<double>(1e-6f)).dump(), "9.999999974752427e-07");
}

TEST(FloatAsDecimal, RoundTripsEveryFloatItIsGiven) {
  // Exact: the decimal read back as a float is the same float, across magnitudes and mantissas.
  for (float value = 1e-30f; value < 1e30f; value *= 1.37f) {
    const double written = nlohmann::json::parse(nlohmann::json(float_as_decimal(value)).dump());
    EXPECT_EQ(static_cast<float>(written), value) << value;
    EXPECT_EQ(static_cast<float>(-float_as_decimal(-value)), value) << value;
  }
}

}  // namespace
}  // namespace boostlm
