// GEMMs on cuBLASLt: kernels/gemm.h's gemm and gemm_batched on device pointers, with a stream.
//
//  - Precision as the CPU backend: bf16 inputs (an operand's bf16 copy when it has one, else its
//    fp32 values rounded into a block of the caching allocator on the stream, as the CPU rounds
//    into scratch) with fp32 accumulation and fp32 C (bf16 C where gemm_batched_bf16_out asks);
//    or fp32, optionally with TF32 products
//    (GemmOptions::tf32, for `--precision fp32` runs that accept 10-bit products; off by default,
//    so fp32 means fp32).
//  - Transposes are cuBLASLt ops on the stored operands and the row-major layout is the swap of
//    gemm_plan.h: no operand is copied or transposed (the CPU backend's plain copy of a transposed
//    bf16 operand is a oneDNN workaround that cuBLASLt does not need).
//  - beta is cuBLASLt's own C input (C and D the same matrix): accumulate = beta 1.
//  - A GemmBatch is one strided-batched matmul (CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT / STRIDED_BATCH_
//    OFFSET): the grouped B factors of q, k, v in one launch.
//  - Epilogues: none is used, because none pays here: cuBLASLt's fusions are bias, ReLU/GELU (and
//    their gradients) and the bias gradient, and the model has no biases and uses SiLU/SwiGLU,
//    which cuBLASLt does not offer. beta (the residual and gradient accumulation) is the one fusion
//    the engine's GEMMs need, and it is in the matmul itself.
//  - Plans (the matmul descriptor, the four layouts and the heuristic's algorithm) are built once
//    per GemmKey (gemm_plan.h: shape, strides, batch, precision, beta ≠ 0, alignments) and cached
//    in the context. The heuristic is asked once per key; the first algorithm it returns is kept.
//  - Each call is counted in kernels/gemm_counters.h at once (calls, FLOPs). With a timer
//    (set_timer), its time is measured with events on the stream and added when collect_timings()
//    runs (the kernel table's context has one, collected whenever the counters are read); without
//    one its time stays 0.
//
// A context's workspace serves one stream at a time: use one context per stream that runs GEMMs.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/event_timer.h"
#include "kernels/cuda/gemm_plan.h"
#include "kernels/gemm.h"
#include "kernels/gemm_counters.h"

namespace boostlm::cuda {

struct GemmOptions {
  bool tf32 = false;  // fp32 GEMMs with TF32 products (CUBLAS_COMPUTE_32F_FAST_TF32)
  // The workspace offered to cuBLASLt; 0: gemm_workspace_bytes() for the current device.
  std::size_t workspace_bytes = 0;
};

// One cuBLASLt matmul, planned: descriptors owned, destroyed with the plan.
struct GemmPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace_bytes = 0;  // what the chosen algorithm uses
  GemmPlan() = default;
  GemmPlan(GemmPlan&& other) noexcept;
  GemmPlan& operator=(GemmPlan&&) = delete;
  GemmPlan(const GemmPlan&) = delete;
  ~GemmPlan();
};

// The cuBLASLt handle, its workspace (device memory from the caching allocator, taken once) and
// the plan cache.
class GemmContext {
 public:
  explicit GemmContext(GemmOptions options = {});
  ~GemmContext();
  GemmContext(const GemmContext&) = delete;
  GemmContext& operator=(const GemmContext&) = delete;

  const GemmOptions& options() const { return options_; }
  std::size_t workspace_bytes() const { return workspace_bytes_; }
  PlanCache<GemmPlan>& plans() { return plans_; }

  // Time each GEMM with events (nullptr: don't). The timer must outlive the context's use.
  void set_timer(EventTimer* timer) { timer_ = timer; }
  // Counts the timed GEMMs whose events have completed into kernels/gemm_counters.h (waits for
  // them: call after the step's synchronisation).
  void collect_timings();

  // The plan for a key, built on a miss (internal to gemm.cpp, public for the tests).
  GemmPlan& plan(const GemmKey& key);
  cublasLtHandle_t handle() const { return handle_; }
  void* workspace() const { return workspace_; }
  EventTimer* timer() const { return timer_; }
  // Books one call of `members` GEMMs of `shape` now, its seconds from `interval` of timer() at
  // collect_timings (no timer: 0 seconds).
  void count(const GemmShape& shape, int64_t members, EventTimer::Interval interval);

 private:
  GemmOptions options_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  PlanCache<GemmPlan> plans_;
  EventTimer* timer_ = nullptr;
  struct Timed {
    EventTimer::Interval interval;
    GemmShape shape;
    int64_t members;
  };
  std::vector<Timed> timed_;
};

// Throws Error naming `call`, the GEMM (describe(key)) and cuBLAS's status unless it is success.
void check_cublaslt(cublasStatus_t status, const char* call, const GemmKey& key);

// kernels/gemm.h's gemm / gemm_batched on device memory (every pointer of A, B and C is device
// memory), enqueued on `stream`.
void gemm(GemmContext& ctx, Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K,
          float alpha, GemmInput A, GemmInput B, float beta, float* C, int64_t ldc, DType compute,
          cudaStream_t stream);
void gemm_batched(GemmContext& ctx, Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K,
                  float alpha, GemmInput A, GemmInput B, float beta, float* C, int64_t ldc,
                  const GemmBatch& batch, DType compute, cudaStream_t stream);
// kernels/gemm.h's gemm_batched_bf16_out: cuBLASLt's bf16 C and D (its epilogue rounds the fp32
// accumulators to nearest even), beta 0.
void gemm_batched_bf16_out(GemmContext& ctx, Trans trans_a, Trans trans_b, int64_t M, int64_t N,
                           int64_t K, float alpha, GemmInput A, GemmInput B, bf16_t* C, int64_t ldc,
                           const GemmBatch& batch, cudaStream_t stream);
inline void gemm(GemmContext& ctx, Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K,
                 float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                 float* C, int64_t ldc, DType compute, cudaStream_t stream) {
  gemm(ctx, trans_a, trans_b, M, N, K, alpha, GemmInput(A, lda), GemmInput(B, ldb), beta, C, ldc,
       compute, stream);
}

}  // namespace boostlm::cuda
