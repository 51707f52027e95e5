// plan/roofline.h: each kind of counted kernel priced in closed form on a device of round numbers.
#include <gtest/gtest.h>

#include "plan/roofline.h"

namespace boostlm::plan {
namespace {

Device round_device() {
  Device d;
  d.gemm[DType::bf16] = {100e12, 0.5, 64};
  d.gemm[DType::f32] = {10e12, 0.8, 0};
  d.memory_bandwidth = 1e12;
  d.elementwise_efficiency = 0.5;
  d.gemm_overhead_s = 2e-6;
  d.kernel_overhead_s = 1e-6;
  d.attention_max_efficiency = 0.5;
  d.attention_half_head_dim = 64;
  return d;
}

TEST(Roofline, EachKindOfKernelAtItsRate) {
  const Device d = round_device();
  DeviceKernelCount gemm{.kernel = "cublasLtMatmul tensor 64x64x64", .launches = 2,
                         .tensor_flops = 2 * 2ull * 64 * 64 * 64, .bytes_read = 1000,
                         .bytes_written = 1000, .m = 64, .n = 64, .k = 64};
  DeviceKernelCount attention{.kernel = "mma_forward_kernel", .launches = 1,
                              .tensor_flops = 1'000'000'000, .bytes_read = 10, .dim = 64};
  DeviceKernelCount fp32{.kernel = "flash_forward_kernel<float>", .launches = 1,
                         .other_flops = 8'000'000, .dim = 64};
  DeviceKernelCount element{.kernel = "add_kernel", .launches = 4, .bytes_read = 2'000'000,
                            .bytes_written = 1'000'000};
  DeviceKernelCount copy{.kernel = "cudaMemset", .launches = 1, .bytes_written = 500'000};
  const Roofline r = price_kernels(d, {gemm, attention, fp32, element, copy});
  ASSERT_EQ(r.rows.size(), 5u);
  auto row = [&](const std::string& name) -> const RooflineRow& {
    for (const auto& x : r.rows)
      if (x.count.kernel == name) return x;
    ADD_FAILURE() << name;
    return r.rows[0];
  };
  // GEMM: 64³ at half speed per dimension = 0.5/8 of 100 TFLOP/s; two calls of overhead.
  EXPECT_NEAR(row(gemm.kernel).compute_s, gemm.tensor_flops / (100e12 * 0.5 / 8), 1e-15);
  EXPECT_NEAR(row(gemm.kernel).memory_s, 2000 / 1e12, 1e-18);
  EXPECT_DOUBLE_EQ(row(gemm.kernel).overhead_s, 4e-6);
  EXPECT_EQ(row(gemm.kernel).kind, KernelClass::gemm);
  // Attention: 100 TFLOP/s · 0.5 · 64/128.
  EXPECT_NEAR(row(attention.kernel).compute_s, 1e9 / 25e12, 1e-15);
  EXPECT_EQ(row(attention.kernel).kind, KernelClass::attention);
  // CUDA-core products at the fp32 curve's best.
  EXPECT_NEAR(row(fp32.kernel).compute_s, 8e6 / 8e12, 1e-15);
  EXPECT_EQ(row(fp32.kernel).kind, KernelClass::cuda_core);
  // Element-wise: bytes at half the bandwidth, four launches.
  EXPECT_NEAR(row(element.kernel).seconds(), 3e6 / 0.5e12 + 4e-6, 1e-15);
  EXPECT_TRUE(row(element.kernel).memory_bound());
  EXPECT_EQ(row(copy.kernel).kind, KernelClass::copy);
  // Totals: launches, FLOPs, the tensor share of the matrix FLOPs, the rows sorted slowest first.
  EXPECT_EQ(r.launches, 9u);
  EXPECT_EQ(r.tensor_flops, gemm.tensor_flops + attention.tensor_flops);
  EXPECT_EQ(r.other_flops, 8'000'000u);
  EXPECT_DOUBLE_EQ(r.tensor_share(), static_cast<double>(r.tensor_flops) /
                                         static_cast<double>(r.tensor_flops + 8'000'000));
  double sum = 0;
  for (size_t i = 0; i < r.rows.size(); ++i) {
    sum += r.rows[i].seconds();
    if (i > 0) {
      EXPECT_GE(r.rows[i - 1].seconds(), r.rows[i].seconds());
    }
  }
  EXPECT_NEAR(r.seconds, sum, 1e-15);
  // The ceilings: FLOPs only (bytes and launches free), then attention at the bf16 GEMMs' best
  // (100 TFLOP/s · 0.5 instead of · 0.25).
  const double flops_only = row(gemm.kernel).compute_s + 1e9 / 25e12 + 8e6 / 8e12;
  EXPECT_NEAR(r.flops_only_s, flops_only, 1e-15);
  EXPECT_NEAR(r.flops_only_attention_at_gemm_s, flops_only - 1e9 / 25e12 + 1e9 / 50e12, 1e-15);
}

}  // namespace
}  // namespace boostlm::plan
