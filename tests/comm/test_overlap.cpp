// --tp-overlap's settings (comm/overlap.h): the mode names and the poll interval's variable.
#include "comm/overlap.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace boostlm {
namespace {

TEST(Overlap, ModesParseAndPrint) {
  for (OverlapMode m : {OverlapMode::on, OverlapMode::off, OverlapMode::automatic})
    EXPECT_EQ(parse_overlap_mode(to_string(m)), m);
  EXPECT_THROW(parse_overlap_mode("maybe"), Error);
}

TEST(Overlap, PollIntervalFromTheEnvironment) {
  EXPECT_EQ(overlap_poll_us(nullptr), CommOverlap::kPollMicroseconds);
  EXPECT_EQ(overlap_poll_us("100"), 100);
  EXPECT_EQ(overlap_poll_us("1000000"), 1000000);
  for (const char* bad : {"", "abc", "100us", "0", "-5", "1000001", "99999999999999999999"}) {
    try {
      overlap_poll_us(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("BOOSTLM_OVERLAP_POLL_US"), std::string::npos) << bad;
      EXPECT_NE(std::string(e.what()).find("1 to 1000000"), std::string::npos) << bad;
    }
  }
}

}  // namespace
}  // namespace boostlm
