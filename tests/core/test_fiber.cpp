// Cooperative tasks (core/fiber.h): strict round-robin at yields, deep stacks, exceptions.
#include "core/fiber.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace boostlm {
namespace {

TEST(Fibers, SwitchInRoundRobinOrderAtYields) {
  std::string trace;
  Fibers fibers;
  std::vector<std::function<void()>> tasks;
  // Task 0 yields twice, task 1 once, task 2 never: the order does not depend on timing.
  tasks.emplace_back([&] {
    trace += "a0 ";
    Fibers::yield();
    trace += "a1 ";
    Fibers::yield();
    trace += "a2 ";
  });
  tasks.emplace_back([&] {
    EXPECT_EQ(Fibers::current_task(), 1);
    trace += "b0 ";
    Fibers::yield();
    trace += "b1 ";
  });
  tasks.emplace_back([&] { trace += "c0 "; });
  fibers.run(tasks);
  EXPECT_EQ(trace, "a0 b0 c0 a1 b1 a2 ");
  EXPECT_FALSE(Fibers::in_task());
  // A second run reuses the stacks.
  trace.clear();
  fibers.run(tasks);
  EXPECT_EQ(trace, "a0 b0 c0 a1 b1 a2 ");
}

TEST(Fibers, YieldOutsideATaskReturnsAtOnce) {
  Fibers::yield();
  EXPECT_FALSE(Fibers::in_task());
  EXPECT_EQ(Fibers::current_task(), -1);
}

int deep(int n) {
  volatile char frame[1024];
  frame[0] = static_cast<char>(n);
  return n == 0 ? frame[0] : deep(n - 1) + 1;
}

TEST(Fibers, TasksHaveDeepStacks) {
  Fibers fibers(size_t{4} << 20);
  int depth = 0;
  fibers.run({[&] { depth = deep(2000); }, [] { Fibers::yield(); }});  // ~2 MB of frames
  EXPECT_EQ(depth, 2000);
}

TEST(Fibers, AnExceptionEndsTheRunAndIsRethrown) {
  Fibers fibers;
  int after = 0;
  EXPECT_THROW(fibers.run({[&] {
                             Fibers::yield();
                             throw std::runtime_error("chunk failed");
                           },
                           [&] {
                             Fibers::yield();
                             Fibers::yield();
                             ++after;  // abandoned: the run ends at the exception
                           }}),
               std::runtime_error);
  EXPECT_EQ(after, 0);
  // The object stays usable.
  int ran = 0;
  fibers.run({[&] { ++ran; }});
  EXPECT_EQ(ran, 1);
}

}  // namespace
}  // namespace boostlm
