// Open MPI hostfiles: the hosts and slots a launch places ranks on, and a message by line for
// every malformed line.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/hostfile.h"

namespace boostlm {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_hostfile(text, "hosts");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Hostfile, ReadsHostsSlotsAndComments) {
  const auto entries = parse_hostfile(
      "node-a slots=4\n\tnode-b slots=2 max_slots=8  # a comment\n# node-c\n"
      "node-a\r\n",
      "hosts");
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].host, "node-a");
  EXPECT_EQ(entries[0].slots, 4);
  EXPECT_EQ(entries[1].host, "node-b");
  EXPECT_EQ(entries[1].max_slots, 8);
  EXPECT_EQ(entries[1].line, 2);
  EXPECT_EQ(entries[2].slots, 0);  // not given
  EXPECT_EQ(entries[2].line, 4);
  EXPECT_EQ(count_hosts(entries), 2);
}

TEST(Hostfile, RefusesBadSlotCountsByLine) {
  EXPECT_EQ(error_of("a slots=0\n"), "hosts line 1: slots=0 is not a whole number in [1, 1048576]");
  EXPECT_NE(error_of("a\nb slots=-2\n").find("hosts line 2: slots=-2"), std::string::npos);
  EXPECT_NE(error_of("a slots=4.5").find("slots=4.5 is not"), std::string::npos);
  EXPECT_NE(error_of("a slots=99999999999999999999999").find("not a whole number"),
            std::string::npos);
  EXPECT_NE(error_of("a slots=").find("not a whole number"), std::string::npos);
  EXPECT_EQ(error_of("a slots=8 max_slots=4"), "hosts line 1: slots=8 exceeds max_slots=4");
}

TEST(Hostfile, RefusesUnknownWordsAndEmptyFiles) {
  EXPECT_NE(error_of("a slts=4").find("unknown 'slts=4' after host a"), std::string::npos);
  EXPECT_NE(error_of("a b").find("unknown 'b'"), std::string::npos);
  EXPECT_EQ(error_of("# nothing\n\n   \n"), "hostfile hosts lists no hosts");
  EXPECT_EQ(error_of(""), "hostfile hosts lists no hosts");
  EXPECT_EQ(error_of(std::string("a\0b slots=1", 11)),
            "hosts line 1: control character 0 (a binary file, not a hostfile?)");
  EXPECT_NE(error_of("slots=2").find("'slots=2' is not a host name"), std::string::npos);
}

}  // namespace
}  // namespace boostlm
