// The CUDA backend's host-only parts, which run without a GPU: the device query, the launch
// geometry, and the scalar math shared with the CPU backend (kernels/math.h, here compiled for the
// host).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/table.h"
#include "kernels/math.h"

namespace boostlm::cuda {
namespace {

// Without a GPU or driver the count is 0 and the reason says why (no crash, no abort); with one,
// there is no reason. Either way the two agree.
TEST(CudaDevice, CountComesWithAReasonWhenZero) {
  std::string why;
  const int count = cuda_visible_devices(&why);
  ASSERT_GE(count, 0);
  if (count == 0) {
    EXPECT_NE(why.find("no CUDA-capable device is detected"), std::string::npos) << why;
    EXPECT_NE(why.find("cudaGetDevice"), std::string::npos) << why;
    std::printf("cuda_visible_devices: 0 (%s)\n", why.c_str());
  } else {
    EXPECT_TRUE(why.empty()) << why;
    std::printf("cuda_visible_devices: %d, device 0: %s\n", count, cuda_device_name(0).c_str());
  }
  // Asking twice gives the same answer (the failed first query leaves no sticky error).
  std::string again;
  EXPECT_EQ(cuda_visible_devices(&again), count);
  EXPECT_EQ(again, why);
  EXPECT_EQ(cuda_visible_devices(), count);  // the reason is optional
}

// The checks name the call, file:line and the library's own error name and string (lookups that
// need no device).
// The CUDA backend implements the whole interface: use_kernels would accept its table (making the
// table touches no CUDA call, so this runs everywhere; its kernels run on a GPU only).
TEST(CudaKernelTable, FillsEveryEntryOfTheInterface) {
  const char* missing = nullptr;
  EXPECT_EQ(kernel_table_filled(cuda::kernel_table(), &missing), kernel_table_size()) << missing;
  EXPECT_STREQ(cuda::kernel_table().backend, "cuda");
}

TEST(CudaChecks, ThrowErrorsNamingTheCallTheLineAndTheLibrarysMessage) {
  try {
    BOOSTLM_CHECK_CUDA(cudaErrorInvalidValue);
    FAIL() << "no throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("test_host.cpp:"), std::string::npos) << what;
    EXPECT_NE(what.find("cudaErrorInvalidValue"), std::string::npos) << what;
    EXPECT_NE(what.find(cudaGetErrorString(cudaErrorInvalidValue)), std::string::npos) << what;
  }
  try {
    BOOSTLM_CHECK_CUBLAS(CUBLAS_STATUS_NOT_SUPPORTED);
    FAIL() << "no throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("test_host.cpp:"), std::string::npos) << what;
    EXPECT_NE(what.find("CUBLAS_STATUS_NOT_SUPPORTED"), std::string::npos) << what;
  }
  EXPECT_NO_THROW(BOOSTLM_CHECK_CUDA(cudaSuccess));
  EXPECT_NO_THROW(BOOSTLM_CHECK_CUBLAS(CUBLAS_STATUS_SUCCESS));
}

TEST(LaunchGeometry, RowsGetOneBlockEachSizedToTheRow) {
  EXPECT_EQ(rows_launch(7, 1).grid, 7);
  EXPECT_EQ(rows_launch(7, 1).block, 128);
  EXPECT_EQ(rows_launch(7, 512).block, 128);  // 4 columns per thread
  EXPECT_EQ(rows_launch(7, 513).block, 256);
  EXPECT_EQ(rows_launch(7, 2048).block, 512);
  EXPECT_EQ(rows_launch(7, 4096).block, 1024);
  EXPECT_EQ(rows_launch(7, 100000).block, 1024);  // wider rows: more columns per thread
  EXPECT_EQ(rows_launch(0, 64).grid, 0);
  EXPECT_EQ(rows_launch(5, 0).grid, 0);
  // Every block size the launcher picks is one a row kernel is compiled for.
  for (int64_t cols = 1; cols < 10000; cols += 37) {
    const int block = rows_launch(3, cols).block;
    bool compiled = false;
    for (int b : kRowBlockSizes) compiled |= b == block;
    EXPECT_TRUE(compiled) << cols;
  }
}

TEST(LaunchGeometry, ElementsAreCoveredByTheGridStride) {
  EXPECT_EQ(elements_launch(0).grid, 0);
  EXPECT_EQ(elements_launch(1).grid, 1);
  EXPECT_EQ(elements_launch(256).grid, 1);
  EXPECT_EQ(elements_launch(257).grid, 2);
  EXPECT_EQ(elements_launch(int64_t{1} << 40).grid, kMaxElementGrid);  // the threads then loop
  EXPECT_EQ(elements_launch(5).block, kElementBlock);
}

TEST(LaunchGeometry, ReductionHasAtLeastOneBlockAndItsWorkspaceHoldsThePartials) {
  EXPECT_EQ(reduce_launch(0).grid, 1);  // n = 0 still writes its (zero) result
  EXPECT_EQ(reduce_launch(kReduceBlock * kReduceItemsPerThread).grid, 1);
  EXPECT_EQ(reduce_launch(kReduceBlock * kReduceItemsPerThread + 1).grid, 2);
  EXPECT_EQ(reduce_launch(int64_t{1} << 40).grid, kMaxReduceGrid);
  EXPECT_EQ(reduce_workspace_bytes(int64_t{1} << 40), kMaxReduceGrid * sizeof(double));
  EXPECT_EQ(reduce_workspace_bytes(10), sizeof(double));
}

// The chunks cover every row exactly once, none is empty, and the workspace holds one partial row
// per chunk.
TEST(LaunchGeometry, ColumnReductionChunksCoverTheRows) {
  for (int64_t rows : {1, 2, 31, 32, 33, 1000, 8191, 8192, 100000}) {
    const ColumnReduceGeometry g = column_reduce_launch(rows, 300);
    EXPECT_EQ(g.column_blocks, 2) << rows;
    EXPECT_GE(g.row_chunks, 1) << rows;
    EXPECT_LE(g.row_chunks, kMaxRowChunks) << rows;
    EXPECT_GE(g.row_chunks * g.rows_per_chunk, rows) << rows;
    EXPECT_LT((g.row_chunks - 1) * g.rows_per_chunk, rows) << rows;  // the last chunk has rows
    EXPECT_EQ(column_reduce_workspace_bytes(rows, 300), g.row_chunks * 300 * sizeof(float));
  }
  EXPECT_EQ(column_reduce_launch(0, 10).row_chunks, 0);
  EXPECT_EQ(column_reduce_workspace_bytes(0, 10), 0u);
}

TEST(LaunchGeometry, ScatterBucketsNeverExceedTheRows) {
  EXPECT_EQ(scatter_rows_launch(3, 10).buckets, 3);
  EXPECT_EQ(scatter_rows_launch(50000, 10).buckets, kMaxScatterBuckets);
  EXPECT_EQ(scatter_rows_launch(50000, 257).column_blocks, 2);
  EXPECT_EQ(scatter_rows_launch(0, 10).column_blocks, 0);
}

// math.h's rounding is core/dtype.h's, bit for bit: every 2^16th pattern of the fp32 range plus
// each pattern near a rounding boundary of some of them, and the special values.
TEST(SharedMath, Bf16RoundingIsTheCoreRounding) {
  for (uint64_t hi = 0; hi < (uint64_t{1} << 16); ++hi)
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, 0x1234u}) {
      const uint32_t bits = static_cast<uint32_t>(hi << 16) | lo;
      float x;
      std::memcpy(&x, &bits, sizeof x);
      ASSERT_EQ(math::round_to_bf16(x), float_to_bf16(x)) << std::hex << bits;
    }
  for (uint32_t b = 0; b <= 0xffffu; ++b) {  // as bits: NaN patterns too
    const float shared = math::from_bf16(static_cast<bf16_t>(b));
    const float core = bf16_to_float(static_cast<bf16_t>(b));
    ASSERT_EQ(std::memcmp(&shared, &core, sizeof shared), 0) << b;
  }
}

// silu_grad is silu's derivative (central difference in double of the float function), and the
// pieces of SwiGLU's gradient are the product rule's.
TEST(SharedMath, SiluGradIsTheDerivative) {
  for (float x = -12.0f; x <= 12.0f; x += 0.37f) {
    const double h = 1e-3;
    const double fd = (static_cast<double>(math::silu(static_cast<float>(x + h))) -
                       math::silu(static_cast<float>(x - h))) /
                      (2 * h);
    EXPECT_NEAR(math::silu_grad(x), fd, 2e-3) << x;  // fp32 evaluation over a 2e-3 step
    float dg, du;
    math::swiglu_grad(0.5f, x, 3.0f, true, dg, du);
    EXPECT_FLOAT_EQ(du, 0.5f * math::silu(x));
    EXPECT_NEAR(dg, 0.5f * 3.0f * math::silu_grad(x), 1e-6 * (1 + std::abs(dg)));
  }
}

// Rotating by +angle and then by −angle gives the pair back (to rounding), and rms_rstd is
// 1/sqrt(mean + eps).
TEST(SharedMath, RopeRotationsAreInverseAndRstdIsTheDefinition) {
  float a = 0.3f, b = -1.7f;
  const double angle = 0.9;
  const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
  math::rope_rotate_pair(a, b, c, s, 1.0f);
  EXPECT_NEAR(a, 0.3 * std::cos(angle) + 1.7 * std::sin(angle), 1e-6);
  math::rope_rotate_pair(a, b, c, s, -1.0f);
  EXPECT_NEAR(a, 0.3, 1e-6);
  EXPECT_NEAR(b, -1.7, 1e-6);
  EXPECT_FLOAT_EQ(math::rms_rstd(8.0f, 2, 0.0f), 0.5f);
  EXPECT_FLOAT_EQ(math::rms_backward_coefficient(3.0f, 0.5f, 3), 0.125f);
}

}  // namespace
}  // namespace boostlm::cuda
