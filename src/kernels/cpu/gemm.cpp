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

// Matmul primitives are expensive to create; one is built per distinct shape and reused.
struct Bf16Engine {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  using Key =
      std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, float>;
  struct Cached {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul primitive;
  };
  std::map<Key, Cached> primitives;
  std::vector<bf16_t> a_scratch, b_scratch;
};

Bf16Engine& bf16_engine() {
  static Bf16Engine engine;
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

// The bf16 data of an operand whose stored shape is rows x cols: its own copy when it has one,
// otherwise a fresh rounding into scratch. Returns the pointer and sets ld.
const bf16_t* bf16_operand(const GemmInput& in, int64_t rows, int64_t cols,
                           std::vector<bf16_t>& scratch, int64_t& ld) {
  if (in.bf16) {
    ld = in.ld;
    return in.bf16;
  }
  if (scratch.size() < static_cast<size_t>(rows * cols)) scratch.resize(rows * cols);
  round_rows(in.f32, rows, cols, in.ld, scratch.data());
  ld = cols;
  return scratch.data();
}

void gemm_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const GemmInput& A,
               const GemmInput& B, float beta, float* C, int64_t ldc) {
  using dnnl::memory;
  Bf16Engine& e = bf16_engine();
  // op(A) is stored as [M, K] (N) or [K, M] (T); the memory descriptor's strides express the
  // transposition, so oneDNN sees a plain or transposed ("ba") matrix without a copy.
  int64_t lda = 0, ldb = 0;
  const bf16_t* a = ta == Trans::N ? bf16_operand(A, M, K, e.a_scratch, lda)
                                   : bf16_operand(A, K, M, e.a_scratch, lda);
  const bf16_t* b = tb == Trans::N ? bf16_operand(B, K, N, e.b_scratch, ldb)
                                   : bf16_operand(B, N, K, e.b_scratch, ldb);

  Bf16Engine::Key key{
      static_cast<int>(ta), static_cast<int>(tb), M, N, K, lda, ldb, ldc, alpha, beta};
  auto it = e.primitives.find(key);
  if (it == e.primitives.end()) {
    memory::dims a_strides = ta == Trans::N ? memory::dims{lda, 1} : memory::dims{1, lda};
    memory::dims b_strides = tb == Trans::N ? memory::dims{ldb, 1} : memory::dims{1, ldb};
    memory::desc a_md({M, K}, memory::data_type::bf16, a_strides);
    memory::desc b_md({K, N}, memory::data_type::bf16, b_strides);
    memory::desc c_md({M, N}, memory::data_type::f32, memory::dims{ldc, 1});
    dnnl::primitive_attr attr;
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, e.engine);
    it = e.primitives.emplace(key, Bf16Engine::Cached{pd, dnnl::matmul(pd)}).first;
  }
  const dnnl::matmul::primitive_desc& pd = it->second.pd;
  memory a_mem(pd.src_desc(), e.engine, const_cast<bf16_t*>(a));
  memory b_mem(pd.weights_desc(), e.engine, const_cast<bf16_t*>(b));
  memory c_mem(pd.dst_desc(), e.engine, C);
  it->second.primitive.execute(
      e.stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
  e.stream.wait();
}

}  // namespace

void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, GemmInput A,
          GemmInput B, float beta, float* C, int64_t ldc, DType compute) {
  BOOSTLM_ASSERT(M >= 0 && N >= 0 && K >= 0);
  if (M == 0 || N == 0) return;
  const auto start = std::chrono::steady_clock::now();
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
  } else if (compute == DType::f32) {
    BOOSTLM_ASSERT_MSG(A.f32 && B.f32, "fp32 GEMM needs fp32 operands");
    dnnl_status_t status = dnnl_sgemm(ta == Trans::N ? 'N' : 'T', tb == Trans::N ? 'N' : 'T', M, N,
                                      K, alpha, A.f32, A.ld, B.f32, B.ld, beta, C, ldc);
    BOOSTLM_ASSERT_MSG(status == dnnl_success, "dnnl_sgemm failed");
  } else {
    gemm_bf16(ta, tb, M, N, K, alpha, A, B, beta, C, ldc);
  }
  g_counters.calls += 1;
  g_counters.flops += 2.0 * static_cast<double>(M) * N * K;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  g_counters.seconds += seconds;
  Profile::global().add("gemm", seconds);
  if (g_recording) g_shapes.push_back({ta, tb, M, N, K, beta, compute});
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
