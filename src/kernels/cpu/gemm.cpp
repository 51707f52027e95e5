#include "kernels/gemm.h"
#include "kernels/cpu/kernels.h"

#include <immintrin.h>
#include <omp.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include <dnnl.h>
#include <dnnl.hpp>

#include "core/buffer.h"
#include "core/device.h"
#include "core/error.h"
#include "core/profile.h"
#include "core/threads.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/gemm_counters.h"

namespace boostlm::cpu {

namespace {

// Matmul primitives are expensive to create; one is built per distinct shape (batch and strides
// included) and thread count, and reused. A primitive keeps the thread count it was created with:
// oneDNN divides the work by it then and runs that many threads whatever the team is later.
// fp32 primitives are made for the team of the moment, so they follow the thread governor
// (core/threads.h) when it shrinks the team on shared cores; their results are the same bits on
// any team. bf16 ones are not: oneDNN's bf16 blocking sums some small weight-gradient products
// in a different order on another thread count (seen at 3 threads: 2e-9 in the K and V factors'
// gradients), so they are made for the process's starting team whatever the team is, and keep
// it: a run's bits never depend on the machine's load, at the price of those GEMMs not adapting.
struct MatmulEngine {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  using Key = std::tuple<int, int, int, int, int, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int64_t, int64_t, int64_t, int64_t, float, float>;
  struct Cached {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul primitive;
  };
  std::map<Key, Cached> primitives;
  Buffer<bf16_t> a_scratch, b_scratch;
};

MatmulEngine& matmul_engine() {
  static MatmulEngine engine;
  return engine;
}

}  // namespace

namespace {
void round_rows(const float* src, int64_t rows, int64_t cols, int64_t ld, bf16_t* dst) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) cpu::round_row_bf16(src + r * ld, cols, dst + r * cols);
}

// dst [cols, rows] (row stride rows) = src [rows, cols] (row stride ld) transposed and rounded to
// bf16 (exact for a bf16 source), 16 columns per task.
template <typename T>
void transpose_round(const T* src, int64_t rows, int64_t cols, int64_t ld, bf16_t* dst) {
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < cols; c0 += 16)
    cpu::transpose_round_columns(src, rows, rows, c0, std::min<int64_t>(16, cols - c0), ld, dst,
                                 rows);
}
}  // namespace

// The bf16_round phase; the rounding gemm() does itself for an operand without a copy is booked
// as gemm_operands instead.
void round_to_bf16(const float* src, int64_t rows, int64_t cols, int64_t ld, bf16_t* dst) {
  BOOSTLM_KERNEL("bf16_round");
  round_rows(src, rows, cols, ld, dst);
}

void widen_bf16(const bf16_t* src, int64_t rows, int64_t cols, int64_t ld_src, float* dst,
                int64_t ld_dst) {
  BOOSTLM_KERNEL("bf16_round");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const bf16_t* in = src + r * ld_src;
    float* out = dst + r * ld_dst;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) out[c] = cpu::to_float(in[c]);
  }
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
                     int64_t stride, Buffer<bf16_t>& scratch) {
  if (in.bf16) return {in.bf16, in.ld, stride};
  const int64_t member = rows * cols;
  if (scratch.size() < static_cast<size_t>(batch.count * member))
    scratch.resize(batch.count * member);
  for (int64_t i = 0; i < batch.count; ++i)
    round_rows(in.f32 + i * stride, rows, cols, in.ld, scratch.data() + i * member);
  return {scratch.data(), cols, member};
}

// A transposed first operand (stored K x M), made plain in bf16 ([M, K] per member, contiguous in
// scratch), rounding as it transposes. oneDNN 2.6's bf16 matmul runs a transposed source slower
// than a plain one on Zen 5 when the reduction is long: the blocks' weight gradients Xᵀ·dY (K =
// 2048 tokens) lose 10-35% (`bench step --breakdown`, copy against none, same minutes), more than
// the copy costs. With K <= kTransposedInPlaceMaxK it does not: the LM head's ∂W slices (K = 512
// rows of a logits chunk, the source 64 KB rows apart) ran as fast in place (149-155 against
// 152-166 ms per step) and the copy's 12 ms went away, so those are read in place. The copy is
// read from the operand's bf16 copy when it has one (exact, and half the bytes), else rounded from
// its fp32 values.
constexpr int64_t kTransposedInPlaceMaxK = 512;
Operand plain_bf16_from_transposed(const GemmInput& in, int64_t M, int64_t K,
                                   const GemmBatch& batch, Buffer<bf16_t>& scratch) {
  const int64_t member = M * K;
  if (scratch.size() < static_cast<size_t>(batch.count * member))
    scratch.resize(batch.count * member);
  for (int64_t i = 0; i < batch.count; ++i) {
    bf16_t* out = scratch.data() + i * member;
    if (in.bf16)
      transpose_round(in.bf16 + i * batch.stride_a, K, M, in.ld, out);
    else
      transpose_round(in.f32 + i * batch.stride_a, K, M, in.ld, out);
  }
  return {scratch.data(), K, member};
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

// C = alpha·op(A)·op(B) + beta·C for every member, on oneDNN's matmul primitive; C of type
// dst_type (fp32, or bf16: the fp32 result rounded to nearest even by the primitive).
void matmul(dnnl::memory::data_type type, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K,
            float alpha, const Operand& a, const Operand& b, float beta, void* C, int64_t ldc,
            const GemmBatch& batch,
            dnnl::memory::data_type dst_type = dnnl::memory::data_type::f32) {
  using dnnl::memory;
  MatmulEngine& e = matmul_engine();
  const int64_t count = batch.count;
  const int team = omp_get_max_threads();
  const int threads =
      type == dnnl::memory::data_type::bf16 ? ThreadGovernor::instance().max_threads() : team;
  MatmulEngine::Key key{threads,
                        static_cast<int>(type),
                        static_cast<int>(dst_type),
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
        matrix_desc(count, M, N, Trans::N, {C, ldc, batch.stride_c}, dst_type);
    dnnl::primitive_attr attr;
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    if (threads != team) omp_set_num_threads(threads);  // oneDNN reads the team at creation
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, e.engine);
    it = e.primitives.emplace(key, MatmulEngine::Cached{pd, dnnl::matmul(pd)}).first;
    if (threads != team) omp_set_num_threads(team);
  }
  const dnnl::matmul::primitive_desc& pd = it->second.pd;
  memory a_mem(pd.src_desc(), e.engine, const_cast<void*>(a.data));
  memory b_mem(pd.weights_desc(), e.engine, const_cast<void*>(b.data));
  memory c_mem(pd.dst_desc(), e.engine, C);
  it->second.primitive.execute(
      e.stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
  e.stream.wait();
}

// Whether oneDNN can build a bf16 matmul on this CPU: Debian's oneDNN 2.6 has bf16 matmul kernels
// only for AVX-512 (avx512_core, with AVX512-BF16 or AMX in hardware, emulated on plain
// avx512_core) and refuses to create one on an AVX2-only CPU such as AMD Zen 3, or under
// ONEDNN_MAX_CPU_ISA=AVX2. Probed once, on a small shape, by creating the primitive descriptor.
bool probe_bf16_matmul() {
  using dnnl::memory;
  try {
    const memory::desc a({16, 16}, memory::data_type::bf16, memory::dims{16, 1});
    const memory::desc c({16, 16}, memory::data_type::f32, memory::dims{16, 1});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), matmul_engine().engine);
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

// Where oneDNN has no bf16 matmul, a bf16 GEMM runs as an fp32 GEMM of its operands' bf16 values
// widened back to fp32. That is the same product up to summation order, not an approximation: a
// product of two bf16 values (8-bit significands) is exact in fp32 (24 bits), and oneDNN's bf16
// matmul also accumulates in fp32. Each operand is widened in its stored layout (its bf16 copy
// when it has one, else its fp32 values rounded to bf16 and back), contiguous per batch member.
struct Widened {
  GemmInput input{nullptr, 0};
  int64_t stride = 0;
};
Widened widen_operand(const GemmInput& in, int64_t rows, int64_t cols, int64_t count,
                      int64_t stride, Buffer<float>& scratch) {
  const int64_t member = rows * cols;
  if (scratch.size() < static_cast<size_t>(count * member)) scratch.resize(count * member);
  for (int64_t i = 0; i < count; ++i) {
    float* out = scratch.data() + i * member;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      float* row = out + r * cols;
      if (in.bf16) {
        const bf16_t* src = in.bf16 + i * stride + r * in.ld;
        for (int64_t c = 0; c < cols; ++c) row[c] = bf16_to_float(src[c]);
      } else {
        const float* src = in.f32 + i * stride + r * in.ld;
        for (int64_t c = 0; c < cols; ++c) row[c] = bf16_to_float(float_to_bf16(src[c]));
      }
    }
  }
  return {GemmInput(scratch.data(), cols), member};
}

void gemm_f32(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const GemmInput& A,
              const GemmInput& B, float beta, float* C, int64_t ldc, const GemmBatch& batch);

double gemm_bf16_widened(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                         const GemmInput& A, const GemmInput& B, float beta, float* C, int64_t ldc,
                         const GemmBatch& batch) {
  static thread_local Buffer<float> a_scratch, b_scratch;
  const double start = now_s();
  const Widened a = ta == Trans::N ? widen_operand(A, M, K, batch.count, batch.stride_a, a_scratch)
                                   : widen_operand(A, K, M, batch.count, batch.stride_a, a_scratch);
  const Widened b = tb == Trans::N ? widen_operand(B, K, N, batch.count, batch.stride_b, b_scratch)
                                   : widen_operand(B, N, K, batch.count, batch.stride_b, b_scratch);
  const double prepared = now_s() - start;
  GemmBatch widened = batch;
  widened.stride_a = a.stride;
  widened.stride_b = b.stride;
  gemm_f32(ta, tb, M, N, K, alpha, a.input, b.input, beta, C, ldc, widened);
  return prepared;
}

// Returns the seconds spent preparing the operands (rounding and transposing), which the caller
// books as their own phase rather than as GEMM time.
double gemm_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                 const GemmInput& A, const GemmInput& B, float beta, void* C, int64_t ldc,
                 const GemmBatch& batch,
                 dnnl::memory::data_type dst_type = dnnl::memory::data_type::f32) {
  if (!bf16_matmul_available()) {
    BOOSTLM_ASSERT(dst_type == dnnl::memory::data_type::f32);
    return gemm_bf16_widened(ta, tb, M, N, K, alpha, A, B, beta, static_cast<float*>(C), ldc,
                             batch);
  }
  MatmulEngine& e = matmul_engine();
  const double start = now_s();
  // A transposed first operand that has a bf16 copy and a short reduction is read in place (see
  // plain_bf16_from_transposed).
  const bool direct_t = ta == Trans::T && A.bf16 && K <= kTransposedInPlaceMaxK;
  const Operand a = ta == Trans::N ? bf16_operand(A, M, K, batch, batch.stride_a, e.a_scratch)
                    : direct_t     ? bf16_operand(A, K, M, batch, batch.stride_a, e.a_scratch)
                                   : plain_bf16_from_transposed(A, M, K, batch, e.a_scratch);
  const Operand b = tb == Trans::N ? bf16_operand(B, K, N, batch, batch.stride_b, e.b_scratch)
                                   : bf16_operand(B, N, K, batch, batch.stride_b, e.b_scratch);
  const double prepared = now_s() - start;
  matmul(dnnl::memory::data_type::bf16, direct_t ? Trans::T : Trans::N, tb, M, N, K, alpha, a, b,
         beta, C, ldc, batch, dst_type);
  return prepared;
}

// fp32 products with a transposed second operand (X·Wᵀ: the LM head's logits, every forward GEMM
// against a weight stored [out, in]) and a reduction of at least this length run on oneDNN's
// matmul primitive (brgemm) rather than dnnl_sgemm: on Zen 5, 2 threads, it took 0.81-0.95 of
// sgemm's time on every such shape of the 60m step (the head's 512 x 32000 x 512 logits chunk 79
// against 88 ms; 2048 x 128 x 512 1.17 against 1.45 ms), where on the other transposition cases
// and on K = 128 it is level with sgemm or up to 18% slower, so those stay on sgemm. The choice
// is by shape only, so a shape always sums in the same order.
constexpr int64_t kTransposedBMatmulMinK = 256;

void gemm_f32(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const GemmInput& A,
              const GemmInput& B, float beta, float* C, int64_t ldc, const GemmBatch& batch) {
  BOOSTLM_ASSERT_MSG(A.f32 && B.f32, "fp32 GEMM needs fp32 operands");
  const bool on_matmul = ta == Trans::N && tb == Trans::T && K >= kTransposedBMatmulMinK;
  if (batch.count == 1 && !on_matmul) {
    const dnnl_status_t status = dnnl_sgemm(ta == Trans::N ? 'N' : 'T', tb == Trans::N ? 'N' : 'T',
                                            M, N, K, alpha, A.f32, A.ld, B.f32, B.ld, beta, C, ldc);
    BOOSTLM_ASSERT_MSG(status == dnnl_success, "dnnl_sgemm failed");
    return;
  }
  matmul(dnnl::memory::data_type::f32, ta, tb, M, N, K, alpha, {A.f32, A.ld, batch.stride_a},
         {B.f32, B.ld, batch.stride_b}, beta, C, ldc, batch);
}

}  // namespace

namespace {

// How bf16 GEMMs run here, chosen once by measured rates (issue 60), not by the ISA alone: oneDNN's
// bf16 matmul where it is built and at least as fast as the alternative, else fp32 GEMMs of the
// widened operands (gemm_bf16_widened: the same products, fp32 speed). On an Intel Xeon (Emerald
// Rapids under KVM, no AMX exposed) the bf16 matmul ran at 170 GFLOP/s against sgemm's 270-350,
// and bf16 training there 1.2-1.8x slower than fp32; on Zen 5 (AVX512-BF16) it is the faster.
// Both are timed on one 512-cube product of bf16 operands, as the engine runs them, best of 3
// after a warm-up; the widened path is taken only when the matmul is more than 10% slower, so
// a CPU where the two are level never flips between runs. BOOSTLM_BF16_GEMM=matmul|widened|auto
// (unset: auto) fixes it, for measuring and for tests of both paths; a job's ranks take rank 0's
// choice (train), so every rank sums the same way.
struct Bf16Choice {
  int path = 0;  // kBf16Matmul or kBf16Widened
  double matmul_gflops = 0, widened_gflops = 0;
  std::string text;  // for the run's first line
};
constexpr int kBf16Matmul = 1, kBf16Widened = 2;

double best_seconds(const std::function<void()>& run) {
  run();  // warm-up: the primitive, the scratch, the caches
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const double t0 = now_s();
    run();
    best = std::min(best, now_s() - t0);
  }
  return best;
}

std::string describe_choice(const Bf16Choice& c, const char* why) {
  std::string text = c.path == kBf16Matmul ? "oneDNN bf16 matmul" : "fp32 GEMM on bf16 operands "
                                                                    "widened to fp32";
  text += " (";
  text += why;
  if (c.matmul_gflops > 0) {
    char rates[160];
    std::snprintf(rates, sizeof rates, ": bf16 matmul %.0f GFLOP/s, widened fp32 %.0f GFLOP/s",
                  c.matmul_gflops, c.widened_gflops);
    text += rates;
  }
  return text + ")";
}

void measure_bf16_paths(Bf16Choice& c) {
  // The probe's own arrays live in the engine's memory (Buffer): under --device cpu-checked that is
  // the checked arena, which only a kernel may touch; the probe is one.
  const DeviceAccess access("gemm_path_probe");
  constexpr int64_t n = 512;
  Buffer<float> a32(n * n), b32(n * n), out(n * n);
  Buffer<bf16_t> a16(n * n), b16(n * n);
  for (int64_t i = 0; i < n * n; ++i) {
    a32[i] = static_cast<float>((i * 7) % 13) * 0.125f - 0.75f;
    b32[i] = static_cast<float>((i * 5) % 11) * 0.125f - 0.625f;
  }
  round_rows(a32.data(), n, n, n, a16.data());
  round_rows(b32.data(), n, n, n, b16.data());
  const GemmInput A(a32.data(), a16.data(), n), B(b32.data(), b16.data(), n);
  const GemmBatch one{};
  const double flops = 2.0 * n * n * n;
  const double matmul_s = best_seconds([&] {
    matmul(dnnl::memory::data_type::bf16, Trans::N, Trans::N, n, n, n, 1.0f,
           {a16.data(), n, 0}, {b16.data(), n, 0}, 0.0f, out.data(), n, one,
           dnnl::memory::data_type::f32);
  });
  const double widened_s = best_seconds([&] {
    gemm_bf16_widened(Trans::N, Trans::N, n, n, n, 1.0f, A, B, 0.0f, out.data(), n, one);
  });
  c.matmul_gflops = flops / matmul_s / 1e9;
  c.widened_gflops = flops / widened_s / 1e9;
}

Bf16Choice choose_bf16_path() {
  Bf16Choice c;
  const char* env = std::getenv("BOOSTLM_BF16_GEMM");
  const std::string asked = env ? env : "auto";
  if (asked != "auto" && asked != "matmul" && asked != "widened")
    throw error("BOOSTLM_BF16_GEMM=", asked, ": expected matmul, widened or auto");
  const bool available = probe_bf16_matmul();
  if (!available) {
    if (asked == "matmul")
      throw error("BOOSTLM_BF16_GEMM=matmul: oneDNN has no bf16 matmul on this CPU (no AVX-512)");
    c.path = kBf16Widened;
    c.text = describe_choice(c, "this CPU has no oneDNN bf16 matmul: no AVX-512");
    return c;
  }
  if (asked != "auto") {
    c.path = asked == "matmul" ? kBf16Matmul : kBf16Widened;
    c.text = describe_choice(c, "BOOSTLM_BF16_GEMM");
    return c;
  }
  measure_bf16_paths(c);
  c.path = c.matmul_gflops >= 0.9 * c.widened_gflops ? kBf16Matmul : kBf16Widened;
  c.text = describe_choice(c, c.path == kBf16Matmul ? "the faster here, measured"
                                                     : "the bf16 matmul is slower here, measured");
  return c;
}

std::mutex& choice_mutex() {
  static std::mutex m;
  return m;
}
std::optional<Bf16Choice>& choice_slot() {
  static std::optional<Bf16Choice> choice;
  return choice;
}
const Bf16Choice& bf16_choice() {
  std::lock_guard<std::mutex> lock(choice_mutex());
  std::optional<Bf16Choice>& c = choice_slot();
  if (!c) c = choose_bf16_path();
  return *c;
}

}  // namespace

bool bf16_matmul_available() {
  return bf16_choice().path == kBf16Matmul;
}

int gemm_path(DType compute) {
  return compute == DType::bf16 ? bf16_choice().path : 0;
}

void set_gemm_path(DType compute, int path) {
  if (compute != DType::bf16 || path == 0 || path == cpu::gemm_path(compute)) return;
  BOOSTLM_ASSERT_MSG(path == kBf16Matmul || path == kBf16Widened, "set_gemm_path: unknown path");
  BOOSTLM_ASSERT_MSG(path != kBf16Matmul || probe_bf16_matmul(),
                     "rank 0 chose oneDNN's bf16 matmul, which this rank's CPU does not have");
  std::lock_guard<std::mutex> lock(choice_mutex());
  Bf16Choice& c = *choice_slot();
  c.path = path;
  c.text = describe_choice(c, "rank 0's choice");
  matmul_engine().primitives.clear();
}

// Whether oneDNN runs its AVX-512 (or newer) kernels here. Below them its fp32 GEMMs split sums
// by the thread count: under ONEDNN_MAX_CPU_ISA=AVX2 a dense step's gradients on 3 threads were
// not those on 1 (Model.StepIsTheSameOnEveryThreadCount), so there a model keeps its team.
bool fp32_gemm_follows_threads() {
  static const bool avx512 = [] {
    const unsigned core = static_cast<unsigned>(dnnl_cpu_isa_avx512_core);
    return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & core) == core;
  }();
  return avx512;
}

bool gemm_keeps_threads(DType compute) {
  return (compute == DType::bf16 && bf16_matmul_available()) || !fp32_gemm_follows_threads();
}

const char* describe_gemm(DType compute) {
  if (compute == DType::f32) return "oneDNN fp32 (sgemm and matmul)";
  return bf16_choice().text.c_str();
}

void gemm_batched(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, GemmInput A,
                  GemmInput B, float beta, float* C, int64_t ldc, const GemmBatch& batch,
                  DType compute) {
  BOOSTLM_ASSERT(M >= 0 && N >= 0 && K >= 0 && batch.count >= 1);
  if (M == 0 || N == 0) return;
  const DeviceAccess access("gemm");
  const auto start = std::chrono::steady_clock::now();
  double operands = 0;  // bf16 rounding/transposition of operands that arrived without a copy
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
    operands = gemm_bf16(ta, tb, M, N, K, alpha, A, B, beta, C, ldc, batch);
  }
  if (operands > 0) Profile::global().add("gemm_operands", operands);
  count_gemm_call(
      {ta, tb, M, N, K, beta, compute}, batch.count,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() - operands);
}

void gemm_batched_bf16_out(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                           GemmInput A, GemmInput B, bf16_t* C, int64_t ldc,
                           const GemmBatch& batch) {
  BOOSTLM_ASSERT(M >= 0 && N >= 0 && K >= 0 && batch.count >= 1);
  if (M == 0 || N == 0) return;
  const DeviceAccess access("gemm");
  const auto start = std::chrono::steady_clock::now();
  double operands = 0;
  if (K > 0 && bf16_matmul_available()) {
    // The primitive's bf16 destination: its fp32 accumulators rounded as they are stored.
    operands =
        gemm_bf16(ta, tb, M, N, K, alpha, A, B, 0.0f, C, ldc, batch, dnnl::memory::data_type::bf16);
  } else {
    // The widened fp32 GEMM (no bf16 units) into a scratch, then rounded: the same bits.
    static thread_local Buffer<float> out;
    const int64_t member = M * N;
    if (out.size() < static_cast<size_t>(batch.count * member)) out.resize(batch.count * member);
    GemmBatch dense = batch;
    dense.stride_c = member;
    if (K == 0)
      std::fill(out.begin(), out.begin() + batch.count * member, 0.0f);
    else
      operands = gemm_bf16(ta, tb, M, N, K, alpha, A, B, 0.0f, out.data(), N, dense);
    for (int64_t i = 0; i < batch.count; ++i) {
      const float* from = out.data() + i * member;
      bf16_t* to = C + i * batch.stride_c;
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < M; ++r) cpu::round_row_bf16(from + r * N, N, to + r * ldc);
    }
  }
  if (operands > 0) Profile::global().add("gemm_operands", operands);
  count_gemm_call(
      {ta, tb, M, N, K, 0.0f, DType::bf16}, batch.count,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() - operands);
}

void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, GemmInput A,
          GemmInput B, float beta, float* C, int64_t ldc, DType compute) {
  cpu::gemm_batched(ta, tb, M, N, K, alpha, A, B, beta, C, ldc, GemmBatch{}, compute);
}

}  // namespace boostlm::cpu
