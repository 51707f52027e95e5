// The host side of the CUDA GEMMs (gemm.h): how a row-major call of kernels/gemm.h becomes
// cuBLASLt's column-major problem, the key its heuristic result is cached under, the cache itself
// and the workspace size. Pure host arithmetic with no CUDA call, tested without a GPU.
//
// Row-major without copies: a row-major matrix [rows, cols] with row stride ld is, read
// column-major, its transpose [cols, rows] with the same ld. So C = op(A)·op(B) (row-major) is
// Cᵀ = op(B)ᵀ·op(A)ᵀ (column-major): cuBLASLt gets the call's B as its A and the call's A as its B,
// m = N and n = M, and the same transpose flags (llm.c and most row-major cuBLAS users do the
// same). The layouts stay in cuBLASLt's default column order, for which every algorithm is
// available, rather than CUBLASLT_ORDER_ROW.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>

#include "kernels/gemm.h"

namespace boostlm::cuda {

// What a GEMM multiplies in and accumulates in: fp32 (exact fp32 products), fp32 with TF32
// products (cuBLAS's CUBLAS_COMPUTE_32F_FAST_TF32: inputs rounded to 10-bit mantissas inside the
// tensor cores; an option of `--precision fp32`, off by default), or bf16 inputs. Every kind
// accumulates in fp32 and writes fp32, as the CPU backend does, or with bf16 inputs bf16 where the
// caller asks (gemm_batched_bf16_out).
enum class GemmPrecision { f32, tf32, bf16 };
const char* to_string(GemmPrecision precision);

// A matrix as cuBLASLt stores it: column-major rows x cols, column stride ld (elements).
struct LtMatrix {
  int64_t rows = 0, cols = 0, ld = 0;
  bool operator==(const LtMatrix&) const = default;
};

// cuBLASLt's view of a row-major call C[M, N] = op(A)[M, K]·op(B)[K, N]: D = op_a(A')·op_b(B')
// with A' the call's B and B' the call's A.
struct LtProblem {
  Trans trans_a = Trans::N, trans_b = Trans::N;  // op_a applies to A' (the call's B), op_b to B'
  int64_t m = 0, n = 0, k = 0;                   // m = N, n = M
  LtMatrix a, b, c;                              // as stored
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;  // elements, A' and B' as above
  bool operator==(const LtProblem&) const = default;
};

// The problem for a row-major call (lda, ldb, ldc: the row strides of A, B, C as kernels/gemm.h
// takes them). Asserts the strides fit their matrices (a row stride below the row's width is a
// broken invariant) and the batch fits cuBLASLt's int32 count.
LtProblem column_major_problem(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K,
                               int64_t lda, int64_t ldb, int64_t ldc, const GemmBatch& batch);

// The largest power of two dividing the address, at most 256 (cuBLASLt's default requirement):
// what the heuristic is told each pointer guarantees (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*).
uint32_t pointer_alignment(const void* p);

// Everything the heuristic's choice depends on: the problem, the precision, whether C is read
// (beta ≠ 0), whether C is written in bf16 (bf16 inputs only: cuBLASLt's bf16 C and D, the fp32
// accumulators rounded in the epilogue) and the alignments of A', B' and C. Two calls with equal
// keys can share an algorithm.
struct GemmKey {
  GemmPrecision precision = GemmPrecision::f32;
  LtProblem problem;
  bool reads_c = false;
  bool bf16_out = false;
  uint32_t align_a = 0, align_b = 0, align_c = 0;
  bool operator==(const GemmKey&) const = default;
};
struct GemmKeyHash {
  std::size_t operator()(const GemmKey& key) const;
};
// "bf16 M=512 N=1024 K=256 op(A)=T op(B)=N lda=.. ldb=.. ldc=.. batch=3 ..." in the caller's
// row-major terms, for error messages.
std::string describe(const GemmKey& key);

// The workspace cuBLASLt is offered: NVIDIA's recommendation (cuBLAS documentation,
// "cublasSetWorkspace"): 32 MiB on Hopper (sm_90) and later, where the largest kernels want it, 4
// MiB before.
std::size_t gemm_workspace_bytes(int sm_major);

// Plans (cuBLASLt descriptors and the chosen algorithm) by key: find, or build once with `make`.
// Counts hits and misses so that a test (or a benchmark) can see that a step builds no plan after
// the first.
template <typename Plan>
class PlanCache {
 public:
  template <typename Make>
  Plan& get(const GemmKey& key, Make&& make) {
    auto it = plans_.find(key);
    if (it != plans_.end()) {
      ++hits_;
      return it->second;
    }
    ++misses_;
    return plans_.emplace(key, make()).first->second;
  }
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }
  std::size_t size() const { return plans_.size(); }
  template <typename F>
  void for_each(F&& f) {
    for (auto& [key, plan] : plans_) f(plan);
  }
  void clear() { plans_.clear(); }

 private:
  std::unordered_map<GemmKey, Plan, GemmKeyHash> plans_;
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace boostlm::cuda
