#include "core/device.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "core/param_table.h"
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

TEST(DeviceChecked, AKernelGivenHostMemoryCrashesNamingItsArgument) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        select_device(Device::cpu_checked);
        Buffer<float> device(16);
        std::vector<float> host(16, 1.0f);  // what a GPU kernel could not read
        copy_values(host.data(), 16, device.data());
        std::exit(0);
      },
      "kernel copy_values was given host memory \\(argument 1");
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

// A device whose memory is host memory but reached only through its registered operations, each
// counted: Buffer's members and the named copies must use them (a GPU backend's are
// cudaMemsetAsync, cudaMemcpyAsync and its pool's allocation).
struct Counts {
  int allocate = 0, release = 0, zero = 0, copy = 0, download = 0, upload = 0;
};
Counts g_counts;

const DeviceMemory& counting_memory() {
  static const DeviceMemory memory = [] {
    DeviceMemory m;
    m.name = "counting";
    m.allocate = [](std::size_t bytes) {
      ++g_counts.allocate;
      void* p = ::operator new (bytes, std::align_val_t{kBufferAlignment});
      std::memset(p, 0, bytes);
      return p;
    };
    m.release = [](void* p) {
      ++g_counts.release;
      ::operator delete (p, std::align_val_t{kBufferAlignment});
    };
    m.zero = [](void* p, std::size_t bytes) {
      ++g_counts.zero;
      std::memset(p, 0, bytes);
    };
    m.copy = [](void* dst, const void* src, std::size_t bytes) {
      ++g_counts.copy;
      std::memmove(dst, src, bytes);
    };
    m.download = [](void* host, const void* src, std::size_t bytes) {
      ++g_counts.download;
      std::memcpy(host, src, bytes);
    };
    m.upload = [](void* dst, const void* host, std::size_t bytes) {
      ++g_counts.upload;
      std::memcpy(dst, host, bytes);
    };
    return m;
  }();
  return memory;
}

TEST(DeviceMemory, BufferMembersAndNamedCopiesUseTheRegisteredOperations) {
  ParamTable table;
  table.add("w", {4, 6}, Init::normal, 0.02f, true);
  table.add("g", {6}, Init::ones, 0.0f, false);
  FlatBuffer in_place(table.total_elements());
  init_parameters(table, in_place, 7);
  std::vector<float> expected(in_place.data(), in_place.data() + in_place.size());

  g_counts = {};
  use_device_memory(&counting_memory());
  EXPECT_FALSE(device_memory_in_place());
  {
    Buffer<float> b(10);
    EXPECT_EQ(g_counts.allocate, 1);
    EXPECT_EQ(g_counts.zero, 1);
    b.resize(40);  // a new block, the old values copied, the rest zeroed
    EXPECT_EQ(g_counts.allocate, 2);
    EXPECT_EQ(g_counts.copy, 1);
    EXPECT_EQ(g_counts.zero, 2);
    b.assign(40, 2.5f);  // not zero: staged and uploaded
    EXPECT_EQ(g_counts.upload, 1);
    {
      const HostView<const float> view(b.data(), b.size(), HostAccess::read, "test");
      EXPECT_EQ(g_counts.download, 1);
      EXPECT_NE(view.data(), b.data());  // a host copy
      EXPECT_EQ(view[39], 2.5f);
    }
    FlatBuffer staged(table.total_elements());
    init_parameters(table, staged, 7);
    EXPECT_EQ(g_counts.upload, 2);  // the whole buffer in one upload
    EXPECT_EQ(std::vector<float>(staged.data(), staged.data() + staged.size()), expected);
    staged.zero();
    EXPECT_EQ(g_counts.zero, 4);  // FlatBuffer's construction and zero()
  }
  EXPECT_EQ(g_counts.release, g_counts.allocate);
  use_device_memory(nullptr);
  EXPECT_TRUE(device_memory_in_place());
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
