#include "kernels/gemm.h"

#include <immintrin.h>
#include <algorithm>
#include <chrono>
#include <map>
#include <tuple>

#include <dnnl.h>
#include <dnnl.hpp>

#include "core/error.h"
#include "core/profile.h"

namespace boostlm {

namespace {

GemmCounters g_counters;
bool g_recording = false;
std::vector<GemmShape> g_shapes;

// Matmul primitives are expensive to create; one is built per distinct shape (batch and strides
// included) and reused.
struct MatmulEngine {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  using Key = std::tuple<int, int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int64_t, int64_t, int64_t, float, float>;
  struct Cached {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul primitive;
  };
  std::map<Key, Cached> primitives;
  std::vector<bf16_t> a_scratch, b_scratch;
};

MatmulEngine& matmul_engine() {
  static MatmulEngine engine;
  return engine;
}

}  // namespace

namespace {
void round_rows(const float* src, int64_t rows, int64_t cols, int64_t ld, bf16_t* dst) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = src + r * ld;
    bf16_t* out = dst + r * cols;
    int64_t c = 0;
#ifdef __AVX512BF16__
    // One instruction per 16 values (round-to-nearest-even, as float_to_bf16).
    for (; c + 16 <= cols; c += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c),
                          (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(in + c)));
#endif
    for (; c < cols; ++c) out[c] = float_to_bf16(in[c]);
  }
}
}  // namespace

// Counted as its own phase when the model rounds; inside gemm() it is part of the GEMM's time.
void round_to_bf16(const float* src, int64_t rows, int64_t cols, int64_t ld, bf16_t* dst) {
  BOOSTLM_PHASE("bf16_round");
  round_rows(src, rows, cols, ld, dst);
}

namespace {

// An operand of a batch as the matmul reads it: data, row stride, member stride.
struct Operand {
  const void* data;
  int64_t ld, stride;
};

// The bf16 data of an operand whose members are stored rows x cols: its own copy when it has one,
// otherwise a fresh rounding of each member into scratch (contiguous, one after the other).
Operand bf16_operand(const GemmInput& in, int64_t rows, int64_t cols, const GemmBatch& batch,
                     int64_t stride, std::vector<bf16_t>& scratch) {
  if (in.bf16) return {in.bf16, in.ld, stride};
  const int64_t member = rows * cols;
  if (scratch.size() < static_cast<size_t>(batch.count * member))
    scratch.resize(batch.count * member);
  for (int64_t i = 0; i < batch.count; ++i)
    round_rows(in.f32 + i * stride, rows, cols, in.ld, scratch.data() + i * member);
  return {scratch.data(), cols, member};
}

// op(X) stored as rows x cols (N) or cols x rows (T) with row stride ld: the memory descriptor's
// strides express the transposition, so oneDNN sees a plain or transposed matrix without a copy;
// a batch adds a leading dimension with the member stride.
dnnl::memory::desc matrix_desc(int64_t count, int64_t rows, int64_t cols, Trans trans,
                               const Operand& x, dnnl::memory::data_type type) {
  using dims = dnnl::memory::dims;
  const dims strides = trans == Trans::N ? dims{x.ld, 1} : dims{1, x.ld};
  if (count == 1) return {{rows, cols}, type, strides};
  return {{count, rows, cols}, type, {x.stride, strides[0], strides[1]}};
}

// C = alpha·op(A)·op(B) + beta·C for every member, on oneDNN's matmul primitive.
void matmul(dnnl::memory::data_type type, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K,
            float alpha, const Operand& a, const Operand& b, float beta, float* C, int64_t ldc,
            const GemmBatch& batch) {
  using dnnl::memory;
  MatmulEngine& e = matmul_engine();
  const int64_t count = batch.count;
  MatmulEngine::Key key{static_cast<int>(type),
                        static_cast<int>(ta),
                        static_cast<int>(tb),
                        count,
                        M,
                        N,
                        K,
                        a.ld,
                        b.ld,
                        ldc,
                        count == 1 ? 0 : a.stride,
                        count == 1 ? 0 : b.stride,
                        count == 1 ? 0 : batch.stride_c,
                        alpha,
                        beta};
  auto it = e.primitives.find(key);
  if (it == e.primitives.end()) {
    const memory::desc a_md = matrix_desc(count, M, K, ta, a, type);
    const memory::desc b_md = matrix_desc(count, K, N, tb, b, type);
    const memory::desc c_md =
        matrix_desc(count, M, N, Trans::N, {C, ldc, batch.stride_c}, memory::data_type::f32);
    dnnl::primitive_attr attr;
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, e.engine);
    it = e.primitives.emplace(key, MatmulEngine::Cached{pd, dnnl::matmul(pd)}).first;
  }
  const dnnl::matmul::primitive_desc& pd = it->second.pd;
  memory a_mem(pd.src_desc(), e.engine, const_cast<void*>(a.data));
  memory b_mem(pd.weights_desc(), e.engine, const_cast<void*>(b.data));
  memory c_mem(pd.dst_desc(), e.engine, C);
  it->second.primitive.execute(
      e.stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
  e.stream.wait();
}

void gemm_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const GemmInput& A,
               const GemmInput& B, float beta, float* C, int64_t ldc, const GemmBatch& batch) {
  MatmulEngine& e = matmul_engine();
  const Operand a = ta == Trans::N ? bf16_operand(A, M, K, batch, batch.stride_a, e.a_scratch)
                                   : bf16_operand(A, K, M, batch, batch.stride_a, e.a_scratch);
  const Operand b = tb == Trans::N ? bf16_operand(B, K, N, batch, batch.stride_b, e.b_scratch)
                                   : bf16_operand(B, N, K, batch, batch.stride_b, e.b_scratch);
  matmul(dnnl::memory::data_type::bf16, ta, tb, M, N, K, alpha, a, b, beta, C, ldc, batch);
}

void gemm_f32(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const GemmInput& A,
              const GemmInput& B, float beta, float* C, int64_t ldc, const GemmBatch& batch) {
  BOOSTLM_ASSERT_MSG(A.f32 && B.f32, "fp32 GEMM needs fp32 operands");
  if (batch.count == 1) {
    const dnnl_status_t status = dnnl_sgemm(ta == Trans::N ? 'N' : 'T', tb == Trans::N ? 'N' : 'T',
                                            M, N, K, alpha, A.f32, A.ld, B.f32, B.ld, beta, C, ldc);
    BOOSTLM_ASSERT_MSG(status == dnnl_success, "dnnl_sgemm failed");
    return;
  }
  matmul(dnnl::memory::data_type::f32, ta, tb, M, N, K, alpha, {A.f32, A.ld, batch.stride_a},
         {B.f32, B.ld, batch.stride_b}, beta, C, ldc, batch);
}

}  // namespace

void gemm_batched(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, GemmInput A,
                  GemmInput B, float beta, float* C, int64_t ldc, const GemmBatch& batch,
                  DType compute) {
  BOOSTLM_ASSERT(M >= 0 && N >= 0 && K >= 0 && batch.count >= 1);
  if (M == 0 || N == 0) return;
  const auto start = std::chrono::steady_clock::now();
  if (K == 0) {
    for (int64_t b = 0; b < batch.count; ++b) {
      float* c = C + b * batch.stride_c;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j)
          c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    }
  } else if (compute == DType::f32) {
    gemm_f32(ta, tb, M, N, K, alpha, A, B, beta, C, ldc, batch);
  } else {
    gemm_bf16(ta, tb, M, N, K, alpha, A, B, beta, C, ldc, batch);
  }
  g_counters.calls += 1;
  g_counters.flops += 2.0 * static_cast<double>(M) * N * K * batch.count;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  g_counters.seconds += seconds;
  Profile::global().add("gemm", seconds);
  if (g_recording)
    for (int64_t b = 0; b < batch.count; ++b) g_shapes.push_back({ta, tb, M, N, K, beta, compute});
}

void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, GemmInput A,
          GemmInput B, float beta, float* C, int64_t ldc, DType compute) {
  gemm_batched(ta, tb, M, N, K, alpha, A, B, beta, C, ldc, GemmBatch{}, compute);
}

double measure_gemm_gflops(int64_t M, int64_t N, int64_t K, DType compute, int reps) {
  std::vector<float> a(M * K, 0.01f), b(K * N, 0.01f), c(M * N);
  std::vector<bf16_t> a16, b16;
  if (compute == DType::bf16) {
    a16.resize(a.size());
    b16.resize(b.size());
    round_to_bf16(a.data(), 1, a.size(), a.size(), a16.data());
    round_to_bf16(b.data(), 1, b.size(), b.size(), b16.data());
  }
  const GemmInput A(a.data(), a16.empty() ? nullptr : a16.data(), K),
      B(b.data(), b16.empty() ? nullptr : b16.data(), N);
  double best = 1e30;
  for (int i = 0; i <= reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    gemm(Trans::N, Trans::N, M, N, K, 1.0f, A, B, 0.0f, c.data(), N, compute);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i > 0) best = std::min(best, seconds);
  }
  return 2.0 * static_cast<double>(M) * N * K / best / 1e9;
}

double measure_peak_gemm_gflops(DType compute) {
  double best = 0;
  for (const int64_t n : {512, 1024, 2048})
    best = std::max(best, measure_gemm_gflops(n, n, n, compute, 3));
  return best;
}

GemmCounters& gemm_counters() {
  return g_counters;
}
void gemm_record_shapes(bool on) {
  g_recording = on;
}
const std::vector<GemmShape>& gemm_recorded_shapes() {
  return g_shapes;
}
void gemm_clear_recorded_shapes() {
  g_shapes.clear();
}

}  // namespace boostlm
