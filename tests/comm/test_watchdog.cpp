// The communication watchdog without MPI (comm_serial): an exchange marked in progress for longer
// than the timeout ends the process with the message and exit code the job-level tests expect
// (death tests: each case runs in a forked child, so the monitor thread starts there). The real
// stuck exchanges under mpirun are in watchdog_probe.cpp / test_watchdog.sh.
#include "comm/watchdog.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

namespace boostlm {
namespace {

void sleep_s(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

TEST(Watchdog, EndsTheProcessOnAStuckExchange) {
  EXPECT_EXIT(
      {
        configure_watchdog(0.2);
        set_watchdog_step(7);
        WatchedExchange watch(intern_group_name("tp"), "recv", 4096);
        sleep_s(10);  // far past the timeout: only the watchdog can end this
        std::exit(0);
      },
      testing::ExitedWithCode(kWatchdogExitCode),
      "communication watchdog: recv of 4096 bytes on group tp has not completed within 0.2 s "
      "\\(training step 7\\)");
}

TEST(Watchdog, SaysWhenOutsideTheTrainingLoop) {
  EXPECT_EXIT(
      {
        configure_watchdog(0.1);
        set_watchdog_step(-1);
        WatchedExchange watch(intern_group_name("world"), "barrier", 0);
        sleep_s(10);
        std::exit(0);
      },
      testing::ExitedWithCode(kWatchdogExitCode),
      "barrier of 0 bytes on group world .*outside the training loop");
}

// Many exchanges, each shorter than the timeout, over several timeouts in all: no false alarm.
TEST(Watchdog, QuietWhileExchangesComplete) {
  EXPECT_EXIT(
      {
        configure_watchdog(0.1);
        for (int i = 0; i < 40; ++i) {
          WatchedExchange watch(intern_group_name("dp"), "all_reduce", 64);
          sleep_s(0.02);
        }
        sleep_s(0.3);  // idle, with nothing in flight, for longer than the timeout
        std::exit(0);
      },
      testing::ExitedWithCode(0), "");
}

TEST(Watchdog, ZeroTurnsItOff) {
  EXPECT_EXIT(
      {
        configure_watchdog(0.1);
        configure_watchdog(0);
        WatchedExchange watch(intern_group_name("pp"), "send", 8);
        sleep_s(0.5);
        std::exit(0);
      },
      testing::ExitedWithCode(0), "");
}

TEST(Watchdog, InternedNamesAreShared) {
  std::string name = "tp";
  const char* a = intern_group_name(name.c_str());
  name = "xx";  // the copy does not depend on the caller's string
  EXPECT_STREQ(a, "tp");
  EXPECT_EQ(a, intern_group_name("tp"));
}

}  // namespace
}  // namespace boostlm
