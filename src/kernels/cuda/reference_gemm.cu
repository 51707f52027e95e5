// A plain GEMM on the GPU, one thread per output element, for the tests: the GEMM the chunked
// cross-entropy's DeviceGemm seam is bound to until cuBLASLt's is (kernels.h), and a check any
// faster GEMM can be compared with. Not for training: no tiles, no tensor cores.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/math.h"

namespace boostlm::cuda {

namespace {

// Element (row, col) of op(X) for a stored operand: its bf16 copy when bf16 compute has one, else
// its fp32 values (rounded to bf16 under bf16 compute).
struct Operand {
  const float* f32;
  const bf16_t* bf16;
  int64_t ld;
  bool transposed, round;
  __device__ float at(int64_t row, int64_t col) const {
    const int64_t e = transposed ? col * ld + row : row * ld + col;
    if (round && bf16) return math::from_bf16(bf16[e]);
    const float x = f32[e];
    return round ? math::from_bf16(math::round_to_bf16(x)) : x;
  }
};

__global__ void reference_gemm_kernel(int64_t M, int64_t N, int64_t K, float alpha, Operand A,
                                      Operand B, float beta, float* C, int64_t ldc) {
  for (int64_t e = grid_index(); e < M * N; e += grid_stride()) {
    const int64_t i = e / N, j = e - i * N;
    float acc = 0.0f;
    for (int64_t p = 0; p < K; ++p) acc += A.at(i, p) * B.at(p, j);
    float* c = C + i * ldc + j;
    *c = beta == 0.0f ? alpha * acc : alpha * acc + beta * *c;
  }
}

}  // namespace

void reference_gemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const GemmInput& A, const GemmInput& B, float beta, float* C, int64_t ldc,
                    DType compute, cudaStream_t stream) {
  const bool round = compute == DType::bf16;
  BOOSTLM_ASSERT((A.f32 || (round && A.bf16)) && (B.f32 || (round && B.bf16)));
  const LaunchGeometry g = elements_launch(M * N);
  if (g.grid == 0) return;
  reference_gemm_kernel<<<grid_of(g.grid), g.block, 0, stream>>>(
      M, N, K, alpha, Operand{A.f32, A.bf16, A.ld, trans_a == Trans::T, round},
      Operand{B.f32, B.bf16, B.ld, trans_b == Trans::T, round}, beta, C, ldc);
  BOOSTLM_CHECK_LAUNCH();
}

}  // namespace boostlm::cuda
