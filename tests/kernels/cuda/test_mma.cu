// kernels/cuda/mma.cuh against the PTX ISA's fragment layouts, written down here as data (the
// figures of "Matrix Fragments for mma.m16n8k16 with floating point type" and "Warp-level matrix
// load instruction: ldmatrix"), not as the header's formulas: each kernel below places and reads
// the matrices' elements through these tables only, so a wrong layout in the header (its
// emulation, or a kernel written on it) and a wrong table cannot agree. The same binary runs on a
// GPU (nvcc, sm_80+), where it checks the hardware's instructions against the same tables.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/mma.cuh"

#ifdef BOOSTLM_CUDA_EMULATOR
#include "cuda_emulator/counters.h"
#endif

namespace {

using boostlm::bf16_t;
using boostlm::bf16_to_float;
using boostlm::float_to_bf16;
namespace mma = boostlm::cuda::mma;

#define CHECK_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// The tests that run the instructions skip, with the reason, where no GPU is visible (a CUDA build
// on a machine without one, as CI's); the emulated device is always there.
class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count == 0)
      GTEST_SKIP() << "no GPU: " << (status != cudaSuccess ? cudaGetErrorString(status) : "none visible");
  }
};
using Mma = DeviceTest;
using Ldmatrix = DeviceTest;

// ---- The ISA's tables. Each entry is "lane:element" for the matrix element at (row, column).

// A, 16 x 16 (.bf16, row): rows 0-7 hold a0,a1 (columns 0-7) and a4,a5 (8-15); rows 8-15 hold
// a2,a3 and a6,a7; the four lanes 4g..4g+3 of group g share row g and row g + 8.
const char* const kTableA[16] = {
    "0:0 0:1 1:0 1:1 2:0 2:1 3:0 3:1 0:4 0:5 1:4 1:5 2:4 2:5 3:4 3:5",
    "4:0 4:1 5:0 5:1 6:0 6:1 7:0 7:1 4:4 4:5 5:4 5:5 6:4 6:5 7:4 7:5",
    "8:0 8:1 9:0 9:1 10:0 10:1 11:0 11:1 8:4 8:5 9:4 9:5 10:4 10:5 11:4 11:5",
    "12:0 12:1 13:0 13:1 14:0 14:1 15:0 15:1 12:4 12:5 13:4 13:5 14:4 14:5 15:4 15:5",
    "16:0 16:1 17:0 17:1 18:0 18:1 19:0 19:1 16:4 16:5 17:4 17:5 18:4 18:5 19:4 19:5",
    "20:0 20:1 21:0 21:1 22:0 22:1 23:0 23:1 20:4 20:5 21:4 21:5 22:4 22:5 23:4 23:5",
    "24:0 24:1 25:0 25:1 26:0 26:1 27:0 27:1 24:4 24:5 25:4 25:5 26:4 26:5 27:4 27:5",
    "28:0 28:1 29:0 29:1 30:0 30:1 31:0 31:1 28:4 28:5 29:4 29:5 30:4 30:5 31:4 31:5",
    "0:2 0:3 1:2 1:3 2:2 2:3 3:2 3:3 0:6 0:7 1:6 1:7 2:6 2:7 3:6 3:7",
    "4:2 4:3 5:2 5:3 6:2 6:3 7:2 7:3 4:6 4:7 5:6 5:7 6:6 6:7 7:6 7:7",
    "8:2 8:3 9:2 9:3 10:2 10:3 11:2 11:3 8:6 8:7 9:6 9:7 10:6 10:7 11:6 11:7",
    "12:2 12:3 13:2 13:3 14:2 14:3 15:2 15:3 12:6 12:7 13:6 13:7 14:6 14:7 15:6 15:7",
    "16:2 16:3 17:2 17:3 18:2 18:3 19:2 19:3 16:6 16:7 17:6 17:7 18:6 18:7 19:6 19:7",
    "20:2 20:3 21:2 21:3 22:2 22:3 23:2 23:3 20:6 20:7 21:6 21:7 22:6 22:7 23:6 23:7",
    "24:2 24:3 25:2 25:3 26:2 26:3 27:2 27:3 24:6 24:7 25:6 25:7 26:6 26:7 27:6 27:7",
    "28:2 28:3 29:2 29:3 30:2 30:3 31:2 31:3 28:6 28:7 29:6 29:7 30:6 30:7 31:6 31:7",
};

// B, 16 x 8 (k x n, .bf16, col): column n is held by the four lanes of group n; rows 0-7 in b0,b1,
// rows 8-15 in b2,b3.
const char* const kTableB[16] = {
    "0:0 4:0 8:0 12:0 16:0 20:0 24:0 28:0", "0:1 4:1 8:1 12:1 16:1 20:1 24:1 28:1",
    "1:0 5:0 9:0 13:0 17:0 21:0 25:0 29:0", "1:1 5:1 9:1 13:1 17:1 21:1 25:1 29:1",
    "2:0 6:0 10:0 14:0 18:0 22:0 26:0 30:0", "2:1 6:1 10:1 14:1 18:1 22:1 26:1 30:1",
    "3:0 7:0 11:0 15:0 19:0 23:0 27:0 31:0", "3:1 7:1 11:1 15:1 19:1 23:1 27:1 31:1",
    "0:2 4:2 8:2 12:2 16:2 20:2 24:2 28:2", "0:3 4:3 8:3 12:3 16:3 20:3 24:3 28:3",
    "1:2 5:2 9:2 13:2 17:2 21:2 25:2 29:2", "1:3 5:3 9:3 13:3 17:3 21:3 25:3 29:3",
    "2:2 6:2 10:2 14:2 18:2 22:2 26:2 30:2", "2:3 6:3 10:3 14:3 18:3 22:3 26:3 30:3",
    "3:2 7:2 11:2 15:2 19:2 23:2 27:2 31:2", "3:3 7:3 11:3 15:3 19:3 23:3 27:3 31:3",
};

// C and D, 16 x 8 (.f32): rows 0-7 in c0,c1, rows 8-15 in c2,c3.
const char* const kTableC[16] = {
    "0:0 0:1 1:0 1:1 2:0 2:1 3:0 3:1",         "4:0 4:1 5:0 5:1 6:0 6:1 7:0 7:1",
    "8:0 8:1 9:0 9:1 10:0 10:1 11:0 11:1",     "12:0 12:1 13:0 13:1 14:0 14:1 15:0 15:1",
    "16:0 16:1 17:0 17:1 18:0 18:1 19:0 19:1", "20:0 20:1 21:0 21:1 22:0 22:1 23:0 23:1",
    "24:0 24:1 25:0 25:1 26:0 26:1 27:0 27:1", "28:0 28:1 29:0 29:1 30:0 30:1 31:0 31:1",
    "0:2 0:3 1:2 1:3 2:2 2:3 3:2 3:3",         "4:2 4:3 5:2 5:3 6:2 6:3 7:2 7:3",
    "8:2 8:3 9:2 9:3 10:2 10:3 11:2 11:3",     "12:2 12:3 13:2 13:3 14:2 14:3 15:2 15:3",
    "16:2 16:3 17:2 17:3 18:2 18:3 19:2 19:3", "20:2 20:3 21:2 21:3 22:2 22:3 23:2 23:3",
    "24:2 24:3 25:2 25:3 26:2 26:3 27:2 27:3", "28:2 28:3 29:2 29:3 30:2 30:3 31:2 31:3",
};

// ldmatrix, one 8 x 8 matrix of b16: which lane holds (row, column), and which half of its register
// (0: the low 16 bits). Without .trans lane 4r + c/2 holds row r; with .trans lane 4c + r/2.
const char* const kTableLdmatrix[8] = {
    "0:0 0:1 1:0 1:1 2:0 2:1 3:0 3:1",         "4:0 4:1 5:0 5:1 6:0 6:1 7:0 7:1",
    "8:0 8:1 9:0 9:1 10:0 10:1 11:0 11:1",     "12:0 12:1 13:0 13:1 14:0 14:1 15:0 15:1",
    "16:0 16:1 17:0 17:1 18:0 18:1 19:0 19:1", "20:0 20:1 21:0 21:1 22:0 22:1 23:0 23:1",
    "24:0 24:1 25:0 25:1 26:0 26:1 27:0 27:1", "28:0 28:1 29:0 29:1 30:0 30:1 31:0 31:1",
};
const char* const kTableLdmatrixTrans[8] = {
    "0:0 4:0 8:0 12:0 16:0 20:0 24:0 28:0", "0:1 4:1 8:1 12:1 16:1 20:1 24:1 28:1",
    "1:0 5:0 9:0 13:0 17:0 21:0 25:0 29:0", "1:1 5:1 9:1 13:1 17:1 21:1 25:1 29:1",
    "2:0 6:0 10:0 14:0 18:0 22:0 26:0 30:0", "2:1 6:1 10:1 14:1 18:1 22:1 26:1 30:1",
    "3:0 7:0 11:0 15:0 19:0 23:0 27:0 31:0", "3:1 7:1 11:1 15:1 19:1 23:1 27:1 31:1",
};

// A table as, for each lane and element, the (row, column) it holds: where[lane * elements + e].
struct Where {
  int row = -1, col = -1;
};
std::vector<Where> parse(const char* const* table, int rows, int cols, int elements) {
  std::vector<Where> where(32 * elements);
  for (int r = 0; r < rows; ++r) {
    const char* p = table[r];
    for (int c = 0; c < cols; ++c) {
      char* end = nullptr;
      const long lane = std::strtol(p, &end, 10);
      EXPECT_EQ(*end, ':') << "table row " << r;
      const long e = std::strtol(end + 1, &end, 10);
      p = end;
      EXPECT_TRUE(lane >= 0 && lane < 32 && e >= 0 && e < elements) << "row " << r << " col " << c;
      Where& w = where[lane * elements + e];
      EXPECT_EQ(w.row, -1) << "lane " << lane << " element " << e << " appears twice";
      w = {r, c};
    }
  }
  for (int i = 0; i < 32 * elements; ++i)
    EXPECT_NE(where[i].row, -1) << "lane " << i / elements << " element " << i % elements
                                << " holds nothing";
  return where;
}

// ---- The header's layout functions say what the tables say.

TEST(MmaLayout, TheHeadersFunctionsAreTheIsaTables) {
  const auto a = parse(kTableA, 16, 16, 8), b = parse(kTableB, 16, 8, 4),
             c = parse(kTableC, 16, 8, 4);
  for (int lane = 0; lane < 32; ++lane) {
    for (int e = 0; e < 8; ++e) {
      EXPECT_EQ(mma::layout::a_row(lane, e), a[lane * 8 + e].row) << lane << " a" << e;
      EXPECT_EQ(mma::layout::a_col(lane, e), a[lane * 8 + e].col) << lane << " a" << e;
    }
    for (int e = 0; e < 4; ++e) {
      EXPECT_EQ(mma::layout::b_row(lane, e), b[lane * 4 + e].row) << lane << " b" << e;
      EXPECT_EQ(mma::layout::b_col(lane, e), b[lane * 4 + e].col) << lane << " b" << e;
      EXPECT_EQ(mma::layout::c_row(lane, e), c[lane * 4 + e].row) << lane << " c" << e;
      EXPECT_EQ(mma::layout::c_col(lane, e), c[lane * 4 + e].col) << lane << " c" << e;
    }
  }
}

// ---- mma.sync on matrices placed and read through the tables.

// where_*: the tables' (row, column) per lane and element, flattened as row * cols + col.
__global__ void mma_kernel(const float* A, const float* B, const float* C, const int* where_a,
                           const int* where_b, const int* where_c, float* D) {
  const int lane = threadIdx.x;
  uint32_t a[4], b[2];
  float c[4], d[4];
  for (int i = 0; i < 4; ++i)
    a[i] = mma::pack_bf16(A[where_a[lane * 8 + 2 * i]], A[where_a[lane * 8 + 2 * i + 1]]);
  for (int i = 0; i < 2; ++i)
    b[i] = mma::pack_bf16(B[where_b[lane * 4 + 2 * i]], B[where_b[lane * 4 + 2 * i + 1]]);
  for (int i = 0; i < 4; ++i) c[i] = C[where_c[lane * 4 + i]];
  mma::mma_bf16_16816(d, a, b, c);
  for (int i = 0; i < 4; ++i) D[where_c[lane * 4 + i]] = d[i];
}

template <typename T>
T* to_device(const std::vector<T>& host) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return p;
}

std::vector<int> flatten(const std::vector<Where>& where, int cols) {
  std::vector<int> out;
  for (const Where& w : where) out.push_back(w.row * cols + w.col);
  return out;
}

TEST_F(Mma, TheProductOfMatricesPlacedByTheTables) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  // bf16-exact inputs: every product is exact in fp32, so D differs from a double reference only
  // by the fp32 sum's rounding.
  auto bf16_values = [&](int n) {
    std::vector<float> v(n);
    for (float& x : v) x = bf16_to_float(float_to_bf16(uniform(rng)));
    return v;
  };
  const std::vector<float> A = bf16_values(16 * 16), B = bf16_values(16 * 8), C = bf16_values(16 * 8);
  const std::vector<int> wa = flatten(parse(kTableA, 16, 16, 8), 16),
                         wb = flatten(parse(kTableB, 16, 8, 4), 8),
                         wc = flatten(parse(kTableC, 16, 8, 4), 8);
  float *dA = to_device(A), *dB = to_device(B), *dC = to_device(C),
        *dD = to_device(std::vector<float>(16 * 8, 0.0f));
  int *dwa = to_device(wa), *dwb = to_device(wb), *dwc = to_device(wc);
#ifdef BOOSTLM_CUDA_EMULATOR
  cuda_emulator::reset_kernel_counters();
#endif
  mma_kernel<<<1, 32>>>(dA, dB, dC, dwa, dwb, dwc, dD);
  CHECK_CUDA(cudaGetLastError());
  std::vector<float> D(16 * 8);
  CHECK_CUDA(cudaMemcpy(D.data(), dD, D.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      double want = C[r * 8 + n];
      for (int k = 0; k < 16; ++k) want += double(A[r * 16 + k]) * B[k * 8 + n];
      EXPECT_NEAR(D[r * 8 + n], want, 1e-5 * (1.0 + std::fabs(want))) << "D[" << r << "][" << n << "]";
    }
#ifdef BOOSTLM_CUDA_EMULATOR
  // One kernel launch with one mma (the copy back is a row of its own, with no FLOPs).
  int kernels = 0;
  for (const auto& c : cuda_emulator::kernel_counters()) {
    if (c.kernel.rfind("cudaMem", 0) == 0) {
      EXPECT_EQ(c.tensor_flops, 0u) << c.kernel;
      continue;
    }
    ++kernels;
    EXPECT_EQ(c.kernel, "mma_kernel");
    EXPECT_EQ(c.launches, 1u);
    EXPECT_EQ(c.tensor_flops, static_cast<uint64_t>(mma::kFlopsPerMma));
  }
  EXPECT_EQ(kernels, 1);
#endif
  for (void* p : {(void*)dA, (void*)dB, (void*)dC, (void*)dD, (void*)dwa, (void*)dwb, (void*)dwc})
    cudaFree(p);
}

// ---- ldmatrix: four (or two) 8 x 8 matrices in shared memory, rows named by the ISA's rule.

// M: kMatrices matrices of 8 x 8 b16 in global memory, copied to shared memory with a row stride
// of 24 elements (48 bytes: rows 16-byte aligned, not contiguous). Lane l names row l % 8 of
// matrix l / 8; out[lane * kMatrices + i] is the lane's register i.
template <int kMatrices, bool kTrans>
__global__ void ldmatrix_kernel(const uint16_t* M, uint32_t* out) {
  constexpr int kStride = 24;
  __shared__ __align__(16) uint16_t tile[kMatrices * 8 * kStride];
  const int lane = threadIdx.x;
  for (int i = lane; i < kMatrices * 64; i += 32)
    tile[(i / 64 * 8 + i % 64 / 8) * kStride + i % 8] = M[i];
  __syncwarp();
  const uint16_t* row = tile + ((lane / 8) % kMatrices * 8 + lane % 8) * kStride;
  uint32_t r[kMatrices];
  if constexpr (kMatrices == 4) {
    if constexpr (kTrans)
      mma::ldmatrix_x4_trans(r, row);
    else
      mma::ldmatrix_x4(r, row);
  } else {
    if constexpr (kTrans)
      mma::ldmatrix_x2_trans(r, row);
    else
      mma::ldmatrix_x2(r, row);
  }
  for (int i = 0; i < kMatrices; ++i) out[lane * kMatrices + i] = r[i];
}

template <int kMatrices, bool kTrans>
void check_ldmatrix() {
  std::vector<uint16_t> M(kMatrices * 64);
  for (std::size_t i = 0; i < M.size(); ++i) M[i] = static_cast<uint16_t>(0x1000 + i);
  uint16_t* dM = to_device(M);
  uint32_t* dout = to_device(std::vector<uint32_t>(32 * kMatrices, 0));
  ldmatrix_kernel<kMatrices, kTrans><<<1, 32>>>(dM, dout);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<uint32_t> out(32 * kMatrices);
  ASSERT_EQ(cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  const auto where = parse(kTrans ? kTableLdmatrixTrans : kTableLdmatrix, 8, 8, 2);
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < kMatrices; ++i)
      for (int half = 0; half < 2; ++half) {
        const Where w = where[lane * 2 + half];
        const uint16_t got = static_cast<uint16_t>(out[lane * kMatrices + i] >> (16 * half));
        EXPECT_EQ(got, M[i * 64 + w.row * 8 + w.col])
            << "lane " << lane << " matrix " << i << " half " << half << (kTrans ? " (.trans)" : "");
      }
  cudaFree(dM);
  cudaFree(dout);
}

TEST_F(Ldmatrix, X4) { check_ldmatrix<4, false>(); }
TEST_F(Ldmatrix, X4Trans) { check_ldmatrix<4, true>(); }
TEST_F(Ldmatrix, X2) { check_ldmatrix<2, false>(); }
TEST_F(Ldmatrix, X2Trans) { check_ldmatrix<2, true>(); }

#ifdef BOOSTLM_CUDA_EMULATOR
// ---- What a GPU leaves undefined, the emulator refuses: mma.sync is .aligned over a full warp.

__global__ void half_warp_mma_kernel(float* D) {
  uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  float c[4] = {0, 0, 0, 0}, d[4];
  mma::mma_bf16_16816(d, a, b, c);
  D[threadIdx.x] = d[0];
}

__global__ void diverged_mma_kernel(float* D) {
  uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  float c[4] = {0, 0, 0, 0}, d[4];
  if (threadIdx.x < 16)
    mma::mma_bf16_16816(d, a, b, c);
  else
    mma::mma_bf16_16816(d, a, b, c);
  D[threadIdx.x] = d[0];
}

TEST(MmaDeathTest, APartialWarpIsAFault) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        float* D = nullptr;
        (void)cudaMalloc(&D, 32 * sizeof(float));
        half_warp_mma_kernel<<<1, 16>>>(D);
        (void)cudaDeviceSynchronize();
      },
      "mma.sync.m16n8k16 .*the mask names lanes that this warp of 16 threads does not have");
}

TEST(MmaDeathTest, LanesAtTwoInstructionsAreAFault) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        float* D = nullptr;
        (void)cudaMalloc(&D, 32 * sizeof(float));
        diverged_mma_kernel<<<1, 32>>>(D);
        (void)cudaDeviceSynchronize();
      },
      "the lanes of a warp must meet at the same instruction");
}
#endif

}  // namespace
