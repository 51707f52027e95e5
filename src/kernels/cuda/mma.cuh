// The tensor-core instructions the backend's kernels use, behind one small header: a warp's
// bf16 matrix product mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 and the shared-memory
// fragment loads ldmatrix.sync.aligned.m8n8.{x2,x4}[.trans].shared.b16 (PTX ISA, "Warp-level
// matrix instructions"; sm_80 and later).
//
// Under nvcc each function is one inline PTX instruction. On the emulated device
// (BOOSTLM_CUDA_EMULATOR) each is a warp-collective operation (cuda_emulator::device::
// warp_collective): the 32 lanes hand over their registers, and the operation is computed on the
// matrices they hold, element by element as the ISA lays fragments out (the `layout` functions
// below), then handed back. tests/kernels/cuda/test_mma.cu checks these against the ISA's layout
// tables written down as data, on the emulated device and on a GPU, so that a kernel and this
// emulation cannot be wrong together.
//
// Fragments (per lane; groupID g = lane / 4, t = lane % 4; two bf16 per 32-bit register, the
// lower-numbered element in the low half):
//   A, 16x16, row-major:   a[0] = A[g][2t..2t+1],     a[1] = A[g+8][2t..2t+1],
//                          a[2] = A[g][2t+8..2t+9],   a[3] = A[g+8][2t+8..2t+9]
//   B, 16x8 (k x n), col:  b[0] = B[2t..2t+1][g],     b[1] = B[2t+8..2t+9][g]
//   C, D, 16x8, fp32:      c[0..1] = C[g][2t..2t+1],  c[2..3] = C[g+8][2t..2t+1]
// ldmatrix .x4: lane l names the address of row l % 8 of matrix l / 8; each lane receives, from
// each matrix i, r[i] = M_i[l / 4][2(l % 4)..2(l % 4)+1] (with .trans: M_i[2(l % 4)][l / 4] and
// M_i[2(l % 4)+1][l / 4]). .x2 reads the addresses of lanes 0-15 (lanes 16-31's are ignored).
#pragma once

#include <cstdint>

#ifdef BOOSTLM_CUDA_EMULATOR
#include <cstring>
#include <source_location>
#endif

#include "kernels/math.h"

// In the emulation every function takes its caller's site as a last, defaulted argument: the
// lanes of a warp must meet at the same instruction, and a fault names where.
#ifdef BOOSTLM_CUDA_EMULATOR
#define BOOSTLM_MMA_CALLER , std::source_location caller = std::source_location::current()
#else
#define BOOSTLM_MMA_CALLER
#endif

namespace boostlm::cuda::mma {

// The shape of one mma.sync: D[16x8] = A[16x16] · B[16x8] + C.
inline constexpr int kM = 16, kN = 8, kK = 16;
// Multiply-adds of one warp's instruction, as FLOPs (2·m·n·k).
inline constexpr int64_t kFlopsPerMma = 2 * kM * kN * kK;

// The ISA's fragment layouts as functions of (lane, element): which row and column of its matrix
// element `e` of a lane's fragment holds (e counts bf16 elements: A 0..7, B 0..3; C 0..3).
namespace layout {
__host__ __device__ constexpr int a_row(int lane, int e) {
  return lane / 4 + ((e / 2) % 2) * 8;
}
__host__ __device__ constexpr int a_col(int lane, int e) {
  return (lane % 4) * 2 + e % 2 + (e / 4) * 8;
}
__host__ __device__ constexpr int b_row(int lane, int e) {
  return (lane % 4) * 2 + e % 2 + (e / 2) * 8;
}
__host__ __device__ constexpr int b_col(int lane, int /*e*/) {
  return lane / 4;
}
__host__ __device__ constexpr int c_row(int lane, int e) {
  return lane / 4 + (e / 2) * 8;
}
__host__ __device__ constexpr int c_col(int lane, int e) {
  return (lane % 4) * 2 + e % 2;
}
}  // namespace layout

// Two fp32 values as one register of two bf16 (round to nearest even; `lo` the lower element).
__device__ inline uint32_t pack_bf16(float lo, float hi) {
#ifdef BOOSTLM_CUDA_EMULATOR
  return static_cast<uint32_t>(math::round_to_bf16(lo)) |
         static_cast<uint32_t>(math::round_to_bf16(hi)) << 16;
#else
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#endif
}

#ifdef BOOSTLM_CUDA_EMULATOR

namespace emulated {

inline float bf16_at(const uint32_t* regs, int e) {
  const uint32_t word = regs[e / 2];
  return math::from_bf16(static_cast<bf16_t>(e % 2 ? word >> 16 : word & 0xFFFFu));
}

struct MmaOperands {
  uint32_t a[4];
  uint32_t b[2];
  float c[4];
};

// D = A·B + C on the matrices the 32 lanes hold: each product of two bf16 is exact in fp32, the
// sum runs in fp32 in k order from C (a GPU's adder tree orders it otherwise: tests state
// tolerances that hold for both).
inline void resolve_mma(const unsigned char* const* given, unsigned char* const* received) {
  float A[kM][kK], B[kK][kN], C[kM][kN];
  for (int lane = 0; lane < 32; ++lane) {
    MmaOperands op;
    std::memcpy(&op, given[lane], sizeof op);
    for (int e = 0; e < 8; ++e) A[layout::a_row(lane, e)][layout::a_col(lane, e)] = bf16_at(op.a, e);
    for (int e = 0; e < 4; ++e) B[layout::b_row(lane, e)][layout::b_col(lane, e)] = bf16_at(op.b, e);
    for (int e = 0; e < 4; ++e) C[layout::c_row(lane, e)][layout::c_col(lane, e)] = op.c[e];
  }
  for (int lane = 0; lane < 32; ++lane) {
    float d[4];
    for (int e = 0; e < 4; ++e) {
      const int r = layout::c_row(lane, e), n = layout::c_col(lane, e);
      float sum = C[r][n];
      for (int k = 0; k < kK; ++k) sum = fmaf(A[r][k], B[k][n], sum);
      d[e] = sum;
    }
    std::memcpy(received[lane], d, sizeof d);
  }
  ::cuda_emulator::device::count_tensor_flops(kFlopsPerMma);
}

// ldmatrix: every lane's address (of row l % 8 of matrix l / 8), then each lane's registers.
template <int kMatrices, bool kTrans>
void resolve_ldmatrix(const unsigned char* const* given, unsigned char* const* received) {
  const uint16_t* rows[32];
  for (int lane = 0; lane < 32; ++lane) std::memcpy(&rows[lane], given[lane], sizeof rows[lane]);
  for (int lane = 0; lane < 32; ++lane) {
    uint32_t r[kMatrices];
    for (int i = 0; i < kMatrices; ++i) {
      const uint16_t* const* m = rows + 8 * i;  // matrix i's eight row addresses
      uint16_t lo, hi;
      if (kTrans) {
        lo = m[2 * (lane % 4)][lane / 4];
        hi = m[2 * (lane % 4) + 1][lane / 4];
      } else {
        lo = m[lane / 4][2 * (lane % 4)];
        hi = m[lane / 4][2 * (lane % 4) + 1];
      }
      r[i] = static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16;
    }
    std::memcpy(received[lane], r, sizeof r);
  }
}

template <int kMatrices, bool kTrans>
inline void ldmatrix(uint32_t* r, const void* row, const std::source_location& caller) {
  // Each row of a matrix is 16 contiguous bytes, 16-byte aligned (the ISA's requirement).
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0)
    ::cuda_emulator::device::device_fault("ldmatrix: a row address that is not 16-byte aligned");
  ::cuda_emulator::device::warp_collective(&row, sizeof row, r, kMatrices * sizeof(uint32_t),
                                           resolve_ldmatrix<kMatrices, kTrans>,
                                           kTrans ? "ldmatrix.trans" : "ldmatrix",
                                           caller.file_name(), static_cast<int>(caller.line()));
}

}  // namespace emulated
#endif

// D = A·B + C for the warp (d may be c).
__device__ inline void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                      const float (&c)[4] BOOSTLM_MMA_CALLER) {
#ifdef BOOSTLM_CUDA_EMULATOR
  emulated::MmaOperands op;
  std::memcpy(op.a, a, sizeof op.a);
  std::memcpy(op.b, b, sizeof op.b);
  std::memcpy(op.c, c, sizeof op.c);
  ::cuda_emulator::device::warp_collective(&op, sizeof op, d, sizeof d, emulated::resolve_mma,
                                           "mma.sync.m16n8k16", caller.file_name(),
                                           static_cast<int>(caller.line()));
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
#endif
}

#ifndef BOOSTLM_CUDA_EMULATOR
namespace ptx {
__device__ inline uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
}  // namespace ptx
#endif

// Four 8x8 matrices of bf16 from shared memory; `row` is this lane's row address (see above).
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* row BOOSTLM_MMA_CALLER) {
#ifdef BOOSTLM_CUDA_EMULATOR
  emulated::ldmatrix<4, false>(r, row, caller);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(ptx::shared_address(row)));
#endif
}

__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row BOOSTLM_MMA_CALLER) {
#ifdef BOOSTLM_CUDA_EMULATOR
  emulated::ldmatrix<4, true>(r, row, caller);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(ptx::shared_address(row)));
#endif
}

__device__ inline void ldmatrix_x2(uint32_t (&r)[2], const void* row BOOSTLM_MMA_CALLER) {
#ifdef BOOSTLM_CUDA_EMULATOR
  emulated::ldmatrix<2, false>(r, row, caller);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(ptx::shared_address(row)));
#endif
}

__device__ inline void ldmatrix_x2_trans(uint32_t (&r)[2], const void* row BOOSTLM_MMA_CALLER) {
#ifdef BOOSTLM_CUDA_EMULATOR
  emulated::ldmatrix<2, true>(r, row, caller);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(ptx::shared_address(row)));
#endif
}

}  // namespace boostlm::cuda::mma
