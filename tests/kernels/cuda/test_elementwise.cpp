// The CUDA element-wise and copy helpers against the CPU backend (kernels/elementwise.h, gemm.h's
// round_to_bf16), on ragged shapes and padded strides. Each output element is one operation on
// its inputs (a copy, a sum, a product, a rounding), the same operation on both sides: compared
// exactly, padding included. They skip, with the reason, where no GPU is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/kernels.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"

namespace boostlm {
namespace {

using cuda::testing::DeviceArray;
using cuda::testing::DeviceTest;
using cuda::testing::random_floats;
using cuda::testing::rounded;

using CudaElementwise = DeviceTest;

const int64_t kSizes[] = {0, 1, 7, 256, 1000, 70001};

TEST_F(CudaElementwise, AddScaledCopyAndCopyValuesAreTheCpuBackendsExactly) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n " << n);
    const auto a = random_floats(n, 1), b = random_floats(n, 2);
    std::vector<float> sum(n), scaled(n), copied(n);
    add(a.data(), b.data(), sum.data(), n);
    scaled_copy(a.data(), -0.37f, scaled.data(), n);
    copy_values(b.data(), n, copied.data());
    DeviceArray<float> da(a), db(b), dsum(n), dscaled(n), dcopied(n), in_place(a);
    cuda::add(da.get(), db.get(), dsum.get(), n, stream);
    cuda::scaled_copy(da.get(), -0.37f, dscaled.get(), n, stream);
    cuda::copy_values(db.get(), n, dcopied.get(), stream);
    cuda::add(in_place.get(), db.get(), in_place.get(), n, stream);  // out aliases a
    sync();
    EXPECT_EQ(dsum.download(), sum);
    EXPECT_EQ(dscaled.download(), scaled);
    EXPECT_EQ(dcopied.download(), copied);
    EXPECT_EQ(in_place.download(), sum);
  }
}

struct Block {
  int64_t rows, cols, ld_src, ld_dst;
};
const Block kBlocks[] = {{1, 1, 1, 1},     {3, 5, 5, 5},         {7, 13, 20, 16},
                         {64, 33, 99, 33}, {300, 128, 384, 130}, {0, 4, 4, 4}};

TEST_F(CudaElementwise, ColumnCopiesAndAddsAreTheCpuBackendsExactly) {
  for (const Block& s : kBlocks) {
    SCOPED_TRACE(::testing::Message()
                 << s.rows << "x" << s.cols << " ld " << s.ld_src << "/" << s.ld_dst);
    const auto src = random_floats(s.rows * s.ld_src, 3);
    const auto dst0 = random_floats(s.rows * s.ld_dst, 4);
    std::vector<float> copied = dst0, added = dst0;
    copy_columns(src.data(), s.ld_src, s.rows, s.cols, copied.data(), s.ld_dst);
    add_columns(src.data(), s.ld_src, s.rows, s.cols, added.data(), s.ld_dst);
    const auto src16 = rounded(src), dst16_0 = rounded(dst0);
    std::vector<bf16_t> copied16 = dst16_0;
    copy_columns(src16.data(), s.ld_src, s.rows, s.cols, copied16.data(), s.ld_dst);

    DeviceArray<float> dsrc(src), dcopied(dst0), dadded(dst0);
    DeviceArray<bf16_t> dsrc16(src16), dcopied16(dst16_0);
    cuda::copy_columns(dsrc.get(), s.ld_src, s.rows, s.cols, dcopied.get(), s.ld_dst, stream);
    cuda::add_columns(dsrc.get(), s.ld_src, s.rows, s.cols, dadded.get(), s.ld_dst, stream);
    cuda::copy_columns(dsrc16.get(), s.ld_src, s.rows, s.cols, dcopied16.get(), s.ld_dst, stream);
    sync();
    EXPECT_EQ(dcopied.download(), copied);
    EXPECT_EQ(dadded.download(), added);
    EXPECT_EQ(dcopied16.download(), copied16);
  }
}

TEST_F(CudaElementwise, ConcatColumnsIsTheCpuBackendsExactly) {
  for (int64_t count : {1, 2, 3, 8})
    for (const Block& s : kBlocks) {
      SCOPED_TRACE(::testing::Message() << count << " blocks of " << s.rows << "x" << s.cols);
      const auto blocks = random_floats(count * s.rows * s.cols, 5);
      std::vector<float> out(count * s.rows * s.cols, -1.0f);
      concat_columns(blocks.data(), count, s.rows, s.cols, out.data());
      DeviceArray<float> dblocks(blocks), dout(std::vector<float>(out.size(), -1.0f));
      cuda::concat_columns(dblocks.get(), count, s.rows, s.cols, dout.get(), stream);
      sync();
      EXPECT_EQ(dout.download(), out);
    }
}

// Rounding to bf16: the CPU's bits (nearest even), NaN and infinities included, padding of the
// source not read into the contiguous result; a batch rounds each member at its stride.
TEST_F(CudaElementwise, RoundToBf16IsTheCpuBackendsBits) {
  for (const Block& s : kBlocks) {
    SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.cols << " ld " << s.ld_src);
    auto src = random_floats(s.rows * s.ld_src, 6, 1000.0f);
    if (!src.empty()) src[0] = NAN;
    if (src.size() > 1) src[1] = INFINITY;
    if (src.size() > 2) src[2] = -0.0f;
    if (src.size() > 3) src[3] = 1.00390625f;  // exactly between two bf16 values: to even
    std::vector<bf16_t> expected(s.rows * s.cols, 0);
    round_to_bf16(src.data(), s.rows, s.cols, s.ld_src, expected.data());
    DeviceArray<float> dsrc(src);
    DeviceArray<bf16_t> dout(s.rows * s.cols);
    cuda::round_to_bf16(dsrc.get(), s.rows, s.cols, s.ld_src, dout.get(), stream);
    sync();
    EXPECT_EQ(dout.download(), expected);
  }
  const int64_t count = 3, rows = 5, cols = 7, ld = 9, stride = rows * ld + 4;
  const auto src = random_floats((count - 1) * stride + rows * ld, 7);
  std::vector<bf16_t> expected(count * rows * cols);
  for (int64_t i = 0; i < count; ++i)
    round_to_bf16(src.data() + i * stride, rows, cols, ld, expected.data() + i * rows * cols);
  DeviceArray<float> dsrc(src);
  DeviceArray<bf16_t> dout(expected.size());
  cuda::round_to_bf16_batched(dsrc.get(), count, stride, rows, cols, ld, dout.get(), stream);
  sync();
  EXPECT_EQ(dout.download(), expected);
}

TEST_F(CudaElementwise, ScaleColumnsAndFill) {
  const int64_t count = 2, rows = 4, cols = 3, ld = 5, stride = rows * ld + 1;
  auto c = random_floats((count - 1) * stride + rows * ld, 8);
  c[6] = NAN;  // member 0, row 1, column 1
  for (float s : {0.0f, 0.5f}) {
    std::vector<float> expected = c;
    for (int64_t m = 0; m < count; ++m)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < cols; ++j) {
          float& x = expected[m * stride + r * ld + j];
          x = s == 0.0f ? 0.0f : s * x;
        }
    DeviceArray<float> dc(c);
    cuda::scale_columns(dc.get(), count, stride, rows, cols, ld, s, stream);
    sync();
    const std::vector<float> got = dc.download();
    for (std::size_t i = 0; i < got.size(); ++i)
      if (std::isnan(expected[i]))
        EXPECT_TRUE(std::isnan(got[i])) << i;
      else
        EXPECT_EQ(got[i], expected[i]) << i;
  }
  for (int64_t n : kSizes) {
    DeviceArray<float> f(n);
    DeviceArray<bf16_t> h(n);
    cuda::fill(f.get(), n, 2.5f, stream);
    cuda::fill(h.get(), n, bf16_t{0x3f80}, stream);
    sync();
    EXPECT_EQ(f.download(), std::vector<float>(n, 2.5f));
    EXPECT_EQ(h.download(), std::vector<bf16_t>(n, bf16_t{0x3f80}));
  }
}

}  // namespace
}  // namespace boostlm
