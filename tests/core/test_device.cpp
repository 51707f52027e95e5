#include "core/device.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/buffer.h"
#include "core/error.h"
#include "kernels/elementwise.h"

namespace boostlm {
namespace {

// The checking mode is process-wide and cannot be turned off, so each case runs in a death test's
// child process: the parent's buffers stay plain.

// Reads a buffer's first element from the host, outside any DeviceAccess scope.
float read_outside(const Buffer<float>& b) {
  return *static_cast<const volatile float*>(b.data());
}

TEST(DeviceChecked, HostReadOutsideABackendCallCrashesWithTheReason) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        select_device(Device::cpu_checked);
        Buffer<float> b(1000);
        std::exit(read_outside(b) == 0.0f ? 3 : 4);  // not reached: the read faults
      },
      "the host touched device memory outside a backend call or a named copy");
}

TEST(DeviceChecked, HostWriteOutsideABackendCallCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        select_device(Device::cpu_checked);
        Buffer<float> b(16);
        b[3] = 1.0f;
        std::exit(0);
      },
      "outside a backend call");
}

// Kernels, named copies and the buffer's own members work; values survive closing and reopening,
// and a buffer freed and allocated again reads as zeros. Exits 0 only if every check held.
[[noreturn]] void use_checked_memory_properly() {
  select_device(Device::cpu_checked);
  Buffer<float> a(5000);
  Buffer<float> b(5000);
  {
    const DeviceAccess fill("test fill");
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i);
  }
  copy_values(a.data(), 5000, b.data());  // a kernel opens its own scope
  a.resize(9000);                         // keeps the values, zeroes the rest
  bool ok = true;
  {
    const DeviceAccess read("test read");
    for (size_t i = 0; i < 5000; ++i) ok = ok && b[i] == static_cast<float>(i);
    for (size_t i = 0; i < 9000; ++i) ok = ok && a[i] == (i < 5000 ? float(i) : 0.0f);
    {
      const DeviceAccess nested("nested");  // closing the inner scope keeps the outer one open
    }
    ok = ok && a[1] == 1.0f;
  }
  a = Buffer<float>();
  Buffer<float> c(9000);  // reuses the freed pages
  {
    const DeviceAccess read("test read");
    for (size_t i = 0; i < c.size(); ++i) ok = ok && c[i] == 0.0f;
  }
  std::exit(ok ? 0 : 1);
}

TEST(DeviceChecked, KernelsNamedCopiesAndBufferMembersReachTheMemory) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(use_checked_memory_properly(), ::testing::ExitedWithCode(0), "");
}

TEST(Device, ParsesTheNamesAndRefusesCudaWithTheReason) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu);
  EXPECT_EQ(parse_device("cpu-checked"), Device::cpu_checked);
  EXPECT_EQ(parse_device("cuda"), Device::cuda);
  EXPECT_THROW(parse_device("gpu"), Error);
  try {
    select_device(Device::cuda);
    FAIL() << "cuda selected in a build without it";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--device cuda"), std::string::npos) << e.what();
  }
  EXPECT_EQ(current_device(), Device::cpu);
}

}  // namespace
}  // namespace boostlm
