#include "kernels/cuda/gemm.h"

#include <memory>
#include <utility>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_allocator.h"
#include "kernels/cuda/kernels.h"

namespace boostlm::cuda {

namespace {

template <typename Value>
void set_layout(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attribute,
                Value value, const GemmKey& key) {
  check_cublaslt(cublasLtMatrixLayoutSetAttribute(layout, attribute, &value, sizeof value),
                 "cublasLtMatrixLayoutSetAttribute", key);
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, const LtMatrix& m, int64_t batch,
                                   int64_t stride, const GemmKey& key) {
  cublasLtMatrixLayout_t layout = nullptr;
  check_cublaslt(cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(m.rows),
                                            static_cast<uint64_t>(m.cols), m.ld),
                 "cublasLtMatrixLayoutCreate", key);
  if (batch > 1) {
    set_layout(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<int32_t>(batch), key);
    set_layout(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride, key);
  }
  return layout;
}

cublasOperation_t op_of(Trans t) {
  return t == Trans::N ? CUBLAS_OP_N : CUBLAS_OP_T;
}

// The heuristic's preference, destroyed on every path.
struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  ~Preference() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
  }
  template <typename Value>
  void set(cublasLtMatmulPreferenceAttributes_t attribute, Value value, const GemmKey& key) {
    check_cublaslt(cublasLtMatmulPreferenceSetAttribute(pref, attribute, &value, sizeof value),
                   "cublasLtMatmulPreferenceSetAttribute", key);
  }
};

GemmPlan build_plan(cublasLtHandle_t handle, const GemmKey& key, std::size_t workspace_bytes) {
  const LtProblem& p = key.problem;
  const cublasComputeType_t compute =
      key.precision == GemmPrecision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaDataType_t input = key.precision == GemmPrecision::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  GemmPlan plan;
  check_cublaslt(cublasLtMatmulDescCreate(&plan.op, compute, CUDA_R_32F),
                 "cublasLtMatmulDescCreate", key);
  const cublasOperation_t ta = op_of(p.trans_a), tb = op_of(p.trans_b);
  check_cublaslt(
      cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
      "cublasLtMatmulDescSetAttribute(TRANSA)", key);
  check_cublaslt(
      cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
      "cublasLtMatmulDescSetAttribute(TRANSB)", key);
  plan.a = make_layout(input, p.a, p.batch, p.stride_a, key);
  plan.b = make_layout(input, p.b, p.batch, p.stride_b, key);
  plan.c = make_layout(key.bf16_out ? CUDA_R_16BF : CUDA_R_32F, p.c, p.batch, p.stride_c, key);

  Preference pref;
  check_cublaslt(cublasLtMatmulPreferenceCreate(&pref.pref), "cublasLtMatmulPreferenceCreate", key);
  pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(workspace_bytes), key);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a, key);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b, key);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c, key);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c, key);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  check_cublaslt(cublasLtMatmulAlgoGetHeuristic(handle, plan.op, plan.a, plan.b, plan.c, plan.c,
                                                pref.pref, 1, &result, &found),
                 "cublasLtMatmulAlgoGetHeuristic", key);
  if (found == 0)
    throw error("cublasLtMatmulAlgoGetHeuristic found no algorithm for the ", describe(key),
                " within a ", workspace_bytes, "-byte workspace");
  plan.algo = result.algo;
  plan.workspace_bytes = result.workspaceSize;
  return plan;
}

// A block of the caching allocator for the length of one enqueued call: freed as soon as the
// work using it is enqueued, which is safe because only work on the same stream can reuse it.
class StreamBlock {
 public:
  StreamBlock(std::size_t bytes, cudaStream_t stream)
      : block_(bytes ? device_allocator().allocate(bytes, stream) : nullptr) {}
  ~StreamBlock() { device_allocator().free(block_); }
  StreamBlock(const StreamBlock&) = delete;
  StreamBlock& operator=(const StreamBlock&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(block_);
  }

 private:
  void* block_;
};

// The bf16 data of an operand stored [rows, cols] (row stride in.ld) per member: its own copy, or
// its fp32 values rounded into `scratch` ([count, rows, cols] contiguous). Returns the data, its
// row stride and its member stride.
struct Bf16Operand {
  const bf16_t* data;
  int64_t ld, stride;
};
Bf16Operand bf16_operand(const GemmInput& in, int64_t rows, int64_t cols, int64_t count,
                         int64_t stride, std::unique_ptr<StreamBlock>& scratch,
                         cudaStream_t stream) {
  if (in.bf16) return {in.bf16, in.ld, stride};
  BOOSTLM_ASSERT_MSG(in.f32, "a GEMM operand without values");
  const int64_t member = rows * cols;
  scratch = std::make_unique<StreamBlock>(count * member * sizeof(bf16_t), stream);
  round_to_bf16_batched(in.f32, count, stride, rows, cols, in.ld, scratch->as<bf16_t>(), stream);
  return {scratch->as<bf16_t>(), cols, member};
}

}  // namespace

void check_cublaslt(cublasStatus_t status, const char* call, const GemmKey& key) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw error(call, " failed for the ", describe(key), ": ", cublasLtGetStatusName(status), " (",
              cublasLtGetStatusString(status), ")");
}

GemmPlan::GemmPlan(GemmPlan&& other) noexcept
    : op(std::exchange(other.op, nullptr)),
      a(std::exchange(other.a, nullptr)),
      b(std::exchange(other.b, nullptr)),
      c(std::exchange(other.c, nullptr)),
      algo(other.algo),
      workspace_bytes(other.workspace_bytes) {}

GemmPlan::~GemmPlan() {
  if (c) cublasLtMatrixLayoutDestroy(c);
  if (b) cublasLtMatrixLayoutDestroy(b);
  if (a) cublasLtMatrixLayoutDestroy(a);
  if (op) cublasLtMatmulDescDestroy(op);
}

GemmContext::GemmContext(GemmOptions options) : options_(options) {
  BOOSTLM_CHECK_CUBLAS(cublasLtCreate(&handle_));
  workspace_bytes_ = options_.workspace_bytes;
  if (workspace_bytes_ == 0) {
    int device = 0, major = 0;
    BOOSTLM_CHECK_CUDA(cudaGetDevice(&device));
    BOOSTLM_CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    workspace_bytes_ = gemm_workspace_bytes(major);
  }
  // Taken once, for the context's life; tagged with no stream (never freed while in use).
  workspace_ = device_allocator().allocate(workspace_bytes_, nullptr);
}

GemmContext::~GemmContext() {
  plans_.clear();
  device_allocator().free(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

GemmPlan& GemmContext::plan(const GemmKey& key) {
  return plans_.get(key, [&] { return build_plan(handle_, key, workspace_bytes_); });
}

void GemmContext::count(const GemmShape& shape, int64_t members, EventTimer::Interval interval) {
  count_gemm_call(shape, members, 0.0);  // calls and FLOPs now; the seconds when collected
  if (timer_) timed_.push_back({interval, shape, members});
}

void GemmContext::collect_timings() {
  if (!timer_) return;
  timer_->collect([&](EventTimer::Interval interval, double seconds) {
    for (auto it = timed_.begin(); it != timed_.end(); ++it)
      if (it->interval == interval) {
        add_gemm_seconds(it->shape, it->members, seconds);
        timed_.erase(it);
        return;
      }
  });
}

namespace {

// Both entries: C fp32 (c32) or, with bf16 inputs and beta 0, bf16 (c16).
void gemm_any(GemmContext& ctx, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
              GemmInput A, GemmInput B, float beta, float* c32, bf16_t* c16, int64_t ldc,
              const GemmBatch& batch, DType compute, cudaStream_t stream) {
  BOOSTLM_ASSERT(M >= 0 && N >= 0 && K >= 0 && batch.count >= 1);
  BOOSTLM_ASSERT((c32 != nullptr) != (c16 != nullptr));
  BOOSTLM_ASSERT(!c16 || (beta == 0.0f && compute == DType::bf16));
  if (M == 0 || N == 0) return;
  void* C = c16 ? static_cast<void*>(c16) : static_cast<void*>(c32);
  const GemmShape shape{ta, tb, M, N, K, beta, compute};
  EventTimer* timer = ctx.timer();
  EventTimer::Interval interval = 0;
  if (K == 0) {
    if (timer) interval = timer->start(stream);
    if (c16)  // zeros (no C read): a fill per member, or per row where rows have gaps
      for (int64_t i = 0; i < batch.count; ++i)
        for (int64_t r = 0; r < (ldc == N ? 1 : M); ++r)
          fill(c16 + i * batch.stride_c + r * ldc, ldc == N ? M * N : N, bf16_t{}, stream);
    else
      scale_columns(c32, batch.count, batch.stride_c, M, N, ldc, beta, stream);
  } else {
    // The operands as the matmul reads them. bf16 rounding of an operand without a copy is not
    // GEMM time (as on the CPU backend): the timed interval starts after it.
    std::unique_ptr<StreamBlock> a_scratch, b_scratch;  // freed once the matmul is enqueued
    GemmKey key;
    const void* a_data;
    const void* b_data;
    int64_t lda, ldb, stride_a = batch.stride_a, stride_b = batch.stride_b;
    if (compute == DType::bf16) {
      key.precision = GemmPrecision::bf16;
      const Bf16Operand a = ta == Trans::N
                                ? bf16_operand(A, M, K, batch.count, stride_a, a_scratch, stream)
                                : bf16_operand(A, K, M, batch.count, stride_a, a_scratch, stream);
      const Bf16Operand b = tb == Trans::N
                                ? bf16_operand(B, K, N, batch.count, stride_b, b_scratch, stream)
                                : bf16_operand(B, N, K, batch.count, stride_b, b_scratch, stream);
      a_data = a.data, lda = a.ld, stride_a = a.stride;
      b_data = b.data, ldb = b.ld, stride_b = b.stride;
    } else {
      BOOSTLM_ASSERT_MSG(A.f32 && B.f32, "fp32 GEMM needs fp32 operands");
      key.precision = ctx.options().tf32 ? GemmPrecision::tf32 : GemmPrecision::f32;
      a_data = A.f32, lda = A.ld;
      b_data = B.f32, ldb = B.ld;
    }
    key.problem = column_major_problem(ta, tb, M, N, K, lda, ldb, ldc,
                                       GemmBatch{batch.count, stride_a, stride_b, batch.stride_c});
    key.reads_c = beta != 0.0f;
    key.bf16_out = c16 != nullptr;
    // cuBLASLt's A is the call's B (gemm_plan.h).
    key.align_a = pointer_alignment(b_data);
    key.align_b = pointer_alignment(a_data);
    key.align_c = pointer_alignment(C);
    const GemmPlan& plan = ctx.plan(key);
    if (timer) interval = timer->start(stream);
    check_cublaslt(cublasLtMatmul(ctx.handle(), plan.op, &alpha, b_data, plan.a, a_data, plan.b,
                                  &beta, C, plan.c, C, plan.c, &plan.algo, ctx.workspace(),
                                  ctx.workspace_bytes(), stream),
                   "cublasLtMatmul", key);
  }
  if (timer) timer->stop(interval, stream);
  ctx.count(shape, batch.count, interval);
}

}  // namespace

void gemm_batched(GemmContext& ctx, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K,
                  float alpha, GemmInput A, GemmInput B, float beta, float* C, int64_t ldc,
                  const GemmBatch& batch, DType compute, cudaStream_t stream) {
  gemm_any(ctx, ta, tb, M, N, K, alpha, A, B, beta, C, nullptr, ldc, batch, compute, stream);
}

void gemm_batched_bf16_out(GemmContext& ctx, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K,
                           float alpha, GemmInput A, GemmInput B, bf16_t* C, int64_t ldc,
                           const GemmBatch& batch, cudaStream_t stream) {
  gemm_any(ctx, ta, tb, M, N, K, alpha, A, B, 0.0f, nullptr, C, ldc, batch, DType::bf16, stream);
}

void gemm(GemmContext& ctx, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
          GemmInput A, GemmInput B, float beta, float* C, int64_t ldc, DType compute,
          cudaStream_t stream) {
  gemm_batched(ctx, ta, tb, M, N, K, alpha, A, B, beta, C, ldc, GemmBatch{}, compute, stream);
}

}  // namespace boostlm::cuda
