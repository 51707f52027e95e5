// The thread governor's decisions (core/threads.h) on windows of the scheduler's accounting.
#include "core/threads.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace boostlm {
namespace {

// A window of `seconds` where each thread ran run_s and waited wait_s.
CpuShareSample window(std::vector<ThreadTimes> threads, double seconds = 0.2) {
  return {seconds, std::move(threads)};
}

const CpuShareSample kIdle2 = window({{0.2, 0.0}, {0.199, 0.001}});
const CpuShareSample kShared2 = window({{0.1, 0.1}, {0.1, 0.1}});  // another process, 2 cores
const CpuShareSample kAlone1 = window({{0.2, 0.001}});             // one thread, not waiting
const CpuShareSample kShared1 = window({{0.08, 0.12}});            // one thread, waiting

TEST(ThreadPolicy, AnIdleMachineKeepsTheWholeTeam) {
  ThreadPolicy policy(2);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(policy.next(kIdle2, 0.2 * i), 2);
}

TEST(ThreadPolicy, EachThreadThatWaitsGivesUpItsCore) {
  ThreadPolicy two(2);
  EXPECT_EQ(two.next(kShared2, 0.2), 1);
  EXPECT_EQ(two.next(kShared1, 0.4), 1);  // never below one
  ThreadPolicy sixteen(16);  // one busy process beside 16 threads: one of them shares its core
  std::vector<ThreadTimes> threads(16, {0.2, 0.0});
  threads[3] = {0.1, 0.1};
  EXPECT_EQ(sixteen.next(window(threads), 0.2), 15);
}

// The team is as slow as its slowest thread: a window that is fine on average but has one
// waiting thread is contended.
TEST(ThreadPolicy, OneWaitingThreadIsEnough) {
  ThreadPolicy policy(4);
  EXPECT_EQ(policy.next(window({{0.2, 0}, {0.2, 0}, {0.2, 0}, {0.12, 0.08}}), 0.2), 3);
}

// Threads runnable under a tenth of the window (MPI's progress thread, the loader) say nothing,
// nor does a window where the process hardly ran, nor one between the two thresholds.
TEST(ThreadPolicy, QuietThreadsAndUnclearWindowsChangeNothing) {
  ThreadPolicy policy(2);
  EXPECT_EQ(policy.next(window({{0.2, 0.0}, {0.2, 0.0}, {0.001, 0.015}}), 0.2), 2);
  EXPECT_EQ(policy.next(window({{0.005, 0.01}, {0.0, 0.0}}), 0.4), 2);
  EXPECT_EQ(policy.next(window({{0.18, 0.02}, {0.18, 0.02}}), 0.6), 2);  // ran 90%
  EXPECT_EQ(policy.next(kShared2, 0.8), 1);
  // Free again, but a window at 90% is no proof: no try, even when one is due.
  EXPECT_EQ(policy.next(window({{0.18, 0.02}}), 5.0), 1);
}

// After the team shrank, the whole team is tried again once the cores look free, after 1 s; each
// try that finds them taken doubles the wait, up to 32 s; a try that succeeds resets it.
TEST(ThreadPolicy, TriesTheWholeTeamAgainWithBackoff) {
  ThreadPolicy policy(2);
  double t = 0.2;
  // Free windows from t on until the whole team is tried; returns the time of the try.
  auto next_try = [&] {
    for (t += 0.2; t < 1000; t += 0.2)
      if (policy.next(kAlone1, t) == 2) return t;
    return -1.0;
  };
  EXPECT_EQ(policy.next(kShared2, t), 1);
  double contended_at = t, wait = ThreadPolicy::kFirstRetry_s;
  for (int attempt = 0; attempt < 8; ++attempt) {
    const double tried_at = next_try();
    EXPECT_GE(tried_at - contended_at, wait - 1e-9) << attempt;
    EXPECT_LT(tried_at - contended_at, wait + 0.2 + 1e-9) << attempt;
    t += 0.2;  // the try finds the cores taken: back to one, and twice the wait
    EXPECT_EQ(policy.next(kShared2, t), 1);
    contended_at = t;
    wait = std::min(2 * wait, ThreadPolicy::kLastRetry_s);
  }
  EXPECT_EQ(wait, ThreadPolicy::kLastRetry_s);
  // A try that finds the cores free keeps the team; the next contention waits 1 s again.
  next_try();
  t += 0.2;
  EXPECT_EQ(policy.next(kIdle2, t), 2);
  t += 0.2;
  EXPECT_EQ(policy.next(kShared2, t), 1);
  contended_at = t;
  EXPECT_NEAR(next_try() - contended_at, ThreadPolicy::kFirstRetry_s, 0.2 + 1e-9);
}

TEST(ThreadPolicy, OneThreadHasNothingToDecide) {
  ThreadPolicy policy(1);
  EXPECT_EQ(policy.next(kShared1, 0.2), 1);
  EXPECT_EQ(policy.next(kAlone1, 5.0), 1);
}

}  // namespace
}  // namespace boostlm
