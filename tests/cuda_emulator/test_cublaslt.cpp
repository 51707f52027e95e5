// The emulated cuBLASLt (src/cuda_emulator/cublaslt.cpp) through the real <cublasLt.h> API, on
// memory from the emulated runtime's cudaMalloc: every transpose pair, leading dimensions above the
// row count, row-major layouts, strided batches (with gaps and a stride-0 broadcast), alpha/beta,
// D = C in place, beta = 0 not reading C, bf16 inputs and TF32 rounding against a double reference
// on the rounded inputs, and every documented invalid argument refused without touching D.
//
// Tolerance (every comparison below): D = alpha·Σ_p a_p·b_p + beta·c computed in fp32 in any order
// (oneDNN blocks and may use FMA) differs from the exact value by at most
// γ_{k+3}·(|alpha|·Σ|a_p·b_p| + |beta|·|c|), γ_j = j·u/(1 − j·u), u = 2^-24: k − 1 additions and k
// products (exact for bf16 and TF32 inputs, one rounding each for fp32), one multiplication by
// alpha, one by beta and one addition (Higham, Accuracy and Stability, §3.1). The double reference
// is exact to far below that.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

namespace {

constexpr float kSentinel = 12345.0f;  // D's elements outside its layout must keep it

#define ASSERT_CUDA(expr) ASSERT_EQ((expr), cudaSuccess)

// The test's own TF32 rounding (to nearest even, 10 explicit mantissa bits), independent of the
// emulator's.
float tf32(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint32_t dropped = bits & 0x1fffu, half = 0x1000u;
  uint32_t kept = bits & ~0x1fffu;
  if (dropped > half || (dropped == half && (kept & 0x2000u))) kept += 0x2000u;
  std::memcpy(&x, &kept, 4);
  return x;
}

float bf16_exact(float x) {  // x truncated to a bf16 value (then exactly representable)
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits &= 0xffff0000u;
  std::memcpy(&x, &bits, 4);
  return x;
}

// A matrix as a cuBLASLt layout describes it.
struct Matrix {
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t order = CUBLASLT_ORDER_COL;
  int32_t batch = 1;
  int64_t stride = 0;
  cudaDataType type = CUDA_R_32F;

  int64_t at(int32_t member, uint64_t r, uint64_t c) const {
    const int64_t ri = static_cast<int64_t>(r), ci = static_cast<int64_t>(c);
    return member * stride + (order == CUBLASLT_ORDER_ROW ? ri * ld + ci : ri + ci * ld);
  }
  int64_t span() const {
    if (rows == 0 || cols == 0) return 0;
    return at(batch - 1, rows - 1, cols - 1) + 1;
  }
};

Matrix col(uint64_t rows, uint64_t cols, int64_t pad = 0) {
  return Matrix{rows, cols, static_cast<int64_t>(rows) + pad};
}

struct Case {
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  Matrix a, b, c, d;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  float alpha = 1.0f, beta = 0.0f;
  bool in_place = false;  // D is C (same memory, Cdesc used for both)
};

// The problem with op(A) m×k, op(B) k×n, C and D m×n; A and B stored for their transposes.
Case make_case(cublasOperation_t ta, cublasOperation_t tb, uint64_t m, uint64_t n, uint64_t k,
               int64_t pad) {
  Case c;
  c.ta = ta;
  c.tb = tb;
  c.a = ta == CUBLAS_OP_N ? col(m, k, pad) : col(k, m, pad);
  c.b = tb == CUBLAS_OP_N ? col(k, n, pad) : col(n, k, pad);
  c.c = col(m, n, pad);
  c.d = col(m, n, pad + 1);
  return c;
}

void batch(Case& c, int32_t count) {
  for (Matrix* x : {&c.a, &c.b, &c.c, &c.d}) {
    x->batch = count;
    x->stride = x->span() + 3;  // a gap between members
  }
}

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& host) : n_(std::max<std::size_t>(host.size(), 1)) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&ptr_), n_ * sizeof(T)), cudaSuccess);
    if (!host.empty()) {
      EXPECT_EQ(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
                cudaSuccess);
    }
  }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return ptr_; }
  std::vector<T> download(std::size_t count) const {
    std::vector<T> host(count);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, count * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

 private:
  T* ptr_ = nullptr;
  std::size_t n_;
};

// Values of a matrix's whole span (gaps included) as fp32; bf16 matrices get bf16 values.
std::vector<float> random_values(const Matrix& x, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(x.span());
  for (float& e : v) e = x.type == CUDA_R_16BF ? bf16_exact(dist(rng)) : dist(rng);
  return v;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    out[i] = static_cast<uint16_t>(bits >> 16);
  }
  return out;
}

// An operand on the device in its layout's type.
struct DeviceOperand {
  DeviceOperand(const Matrix& x, const std::vector<float>& values) {
    if (x.type == CUDA_R_16BF)
      bf16 = std::make_unique<DeviceArray<uint16_t>>(to_bf16(values));
    else
      f32 = std::make_unique<DeviceArray<float>>(values);
  }
  void* get() const { return bf16 ? static_cast<void*>(bf16->get()) : f32->get(); }
  std::unique_ptr<DeviceArray<float>> f32;
  std::unique_ptr<DeviceArray<uint16_t>> bf16;
};

// The descriptors of a case, made through the API and destroyed with it.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;

  explicit Descriptors(const Case& k, uint64_t max_workspace) {
    EXPECT_EQ(cublasLtMatmulDescCreate(&op, k.compute, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    const int32_t ta = k.ta, tb = k.tb;
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
              CUBLAS_STATUS_SUCCESS);
    a = layout(k.a);
    b = layout(k.b);
    c = layout(k.c);
    d = k.in_place ? c : layout(k.d);
    EXPECT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &max_workspace, sizeof max_workspace),
              CUBLAS_STATUS_SUCCESS);
  }
  ~Descriptors() {
    cublasLtMatmulPreferenceDestroy(pref);
    if (d != c) cublasLtMatrixLayoutDestroy(d);
    for (cublasLtMatrixLayout_t l : {a, b, c}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(op);
  }
  static cublasLtMatrixLayout_t layout(const Matrix& x) {
    cublasLtMatrixLayout_t l = nullptr;
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&l, x.type, x.rows, x.cols, x.ld), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &x.order, sizeof x.order),
        CUBLAS_STATUS_SUCCESS);
    if (x.batch != 1) {
      EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &x.batch,
                                                 sizeof x.batch),
                CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                 &x.stride, sizeof x.stride),
                CUBLAS_STATUS_SUCCESS);
    }
    return l;
  }
};

class CublasLt : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
    ASSERT_CUDA(cudaStreamCreate(&stream));
  }
  void TearDown() override {
    cudaStreamDestroy(stream);
    cublasLtDestroy(handle);
  }
  cublasLtHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
};

// Host values of a case and what cuBLASLt must compute from them.
struct Outcome {
  Case k;
  std::vector<float> a, b, c, d_initial, d;  // d: the result downloaded, over D's span
  cublasStatus_t heuristic = CUBLAS_STATUS_SUCCESS, matmul = CUBLAS_STATUS_SUCCESS;
};

// Fills the case's operands with random values, runs heuristic and matmul on `stream`, then
// synchronises and downloads D. `tweak` may change the descriptors or pointers before the matmul.
struct Pointers {
  cublasLtHandle_t handle;
  const void *a, *b, *c;
  void* d;
  void* workspace;
  size_t workspace_bytes;
  const cublasLtMatmulAlgo_t* algo;
  const float *alpha, *beta;
};
Outcome run_case(cublasLtHandle_t handle, cudaStream_t stream, const Case& k, unsigned seed,
                 const std::function<void(Descriptors&, Pointers&)>& tweak = {}) {
  std::mt19937 rng(seed);
  Outcome r;
  r.k = k;
  r.a = random_values(k.a, rng);
  r.b = random_values(k.b, rng);
  r.c = random_values(k.c, rng);
  r.d_initial.assign(k.in_place ? k.c.span() : k.d.span(), kSentinel);
  if (k.in_place) r.d_initial = r.c;
  DeviceOperand a(k.a, r.a), b(k.b, r.b);
  DeviceArray<float> c(r.c), d(k.in_place ? std::vector<float>() : r.d_initial);
  constexpr uint64_t kWorkspace = 1 << 20;
  DeviceArray<char> workspace{std::vector<char>(kWorkspace)};
  Descriptors desc(k, kWorkspace);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  r.heuristic = cublasLtMatmulAlgoGetHeuristic(handle, desc.op, desc.a, desc.b, desc.c, desc.d,
                                               desc.pref, 1, &result, &found);
  if (r.heuristic != CUBLAS_STATUS_SUCCESS) return r;
  EXPECT_EQ(found, 1);
  EXPECT_LE(result.workspaceSize, kWorkspace);
  Pointers p{handle,          a.get(),    b.get(),      c.get(),  k.in_place ? c.get() : d.get(),
             workspace.get(), kWorkspace, &result.algo, &k.alpha, &k.beta};
  if (tweak) tweak(desc, p);
  r.matmul = cublasLtMatmul(p.handle, desc.op, p.alpha, p.a, desc.a, p.b, desc.b, p.beta, p.c,
                            desc.c, p.d, desc.d, p.algo, p.workspace, p.workspace_bytes, stream);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  r.d = (k.in_place ? c : d).download(r.d_initial.size());
  return r;
}

// Compares D with the double reference on the (rounded) inputs, element by element, within the
// bound of the file comment, and checks that D's elements outside its layout are untouched.
// Returns the largest error relative to its bound (< 1 passes).
double check_result(const Outcome& r, bool round_tf32, bool expect_pass = true) {
  const Case& k = r.k;
  const Matrix& dl = k.in_place ? k.c : k.d;
  const bool ta = k.ta != CUBLAS_OP_N, tb = k.tb != CUBLAS_OP_N;
  const int64_t m = dl.rows, n = dl.cols, depth = ta ? k.a.rows : k.a.cols;
  const double u = std::ldexp(1.0, -24), j = static_cast<double>(depth + 3);
  const double gamma = j * u / (1 - j * u);
  auto in = [&](float x) { return static_cast<double>(round_tf32 ? tf32(x) : x); };
  std::vector<bool> inside(r.d.size(), false);
  double worst = 0;
  for (int32_t i = 0; i < dl.batch; ++i)
    for (int64_t row = 0; row < m; ++row)
      for (int64_t c = 0; c < n; ++c) {
        double sum = 0, magnitude = 0;
        for (int64_t p = 0; p < depth; ++p) {
          const double x = in(r.a[ta ? k.a.at(i, p, row) : k.a.at(i, row, p)]);
          const double y = in(r.b[tb ? k.b.at(i, c, p) : k.b.at(i, p, c)]);
          sum += x * y;
          magnitude += std::fabs(x * y);
        }
        const double cv = k.beta != 0.0f ? r.c[k.c.at(i, row, c)] : 0.0;
        const double want = k.alpha * sum + k.beta * cv;
        const double bound = gamma * (std::fabs(k.alpha) * magnitude + std::fabs(k.beta * cv));
        const int64_t at = dl.at(i, row, c);
        inside[at] = true;
        const double error = std::fabs(r.d[at] - want);
        worst = std::max(worst, bound > 0 ? error / bound : (error > 0 ? 1e300 : 0.0));
        if (expect_pass) {
          EXPECT_LE(error, bound) << "member " << i << " D(" << row << "," << c << ") = " << r.d[at]
                                  << ", reference " << want;
        }
      }
  for (std::size_t e = 0; e < r.d.size(); ++e) {
    if (!inside[e]) {
      EXPECT_EQ(r.d[e], r.d_initial[e]) << "D element " << e << " outside the layout";
    }
  }
  return worst;
}

TEST_F(CublasLt, EveryTransposeWithLeadingDimensionsAboveRows) {
  for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T})
    for (cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      SCOPED_TRACE(testing::Message() << "ta=" << ta << " tb=" << tb);
      Case k = make_case(ta, tb, 5, 7, 3, 2);
      k.alpha = 1.5f;
      k.beta = -0.5f;
      const Outcome r = run_case(handle, stream, k, 1 + 2 * ta + tb);
      ASSERT_EQ(r.heuristic, CUBLAS_STATUS_SUCCESS);
      ASSERT_EQ(r.matmul, CUBLAS_STATUS_SUCCESS);
      check_result(r, false);
    }
}

TEST_F(CublasLt, LargerShapesAndTightLeadingDimensions) {
  Case k = make_case(CUBLAS_OP_T, CUBLAS_OP_N, 64, 48, 96, 0);
  k.alpha = -0.75f;
  const Outcome r = run_case(handle, stream, k, 7);
  ASSERT_EQ(r.matmul, CUBLAS_STATUS_SUCCESS);
  check_result(r, false);
}

TEST_F(CublasLt, RowOrderLayouts) {
  for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T}) {
    Case k = make_case(ta, CUBLAS_OP_T, 4, 6, 5, 0);
    for (Matrix* x : {&k.a, &k.b, &k.c, &k.d}) {
      x->order = CUBLASLT_ORDER_ROW;
      x->ld = static_cast<int64_t>(x->cols) + 2;
    }
    k.beta = 2.0f;
    const Outcome r = run_case(handle, stream, k, 11 + ta);
    ASSERT_EQ(r.matmul, CUBLAS_STATUS_SUCCESS);
    check_result(r, false);
  }
}

TEST_F(CublasLt, StridedBatchesWithGaps) {
  for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T}) {
    Case k = make_case(ta, CUBLAS_OP_N, 3, 4, 5, 1);
    batch(k, 3);
    k.alpha = 0.5f;
    k.beta = 1.0f;
    const Outcome r = run_case(handle, stream, k, 21 + ta);
    ASSERT_EQ(r.matmul, CUBLAS_STATUS_SUCCESS);
    check_result(r, false);
  }
}

// B's stride 0: every member multiplies the same B. D's members interleaved by column (stride
// rows, ld = batch·rows): they share no element, so this is no race.
TEST_F(CublasLt, BroadcastAndInterleavedBatches) {
  Case k = make_case(CUBLAS_OP_N, CUBLAS_OP_N, 3, 4, 2, 0);
  batch(k, 3);
  k.b.stride = 0;
  k.d.stride = 3;
  k.d.ld = 9;
  const Outcome r = run_case(handle, stream, k, 31);
  ASSERT_EQ(r.matmul, CUBLAS_STATUS_SUCCESS);
  check_result(r, false);
}

TEST_F(CublasLt, InPlaceDIsC) {
  Case k = make_case(CUBLAS_OP_T, CUBLAS_OP_T, 6, 5, 4, 1);
  batch(k, 2);
  k.in_place = true;
  k.alpha = 2.0f;
  k.beta = 0.25f;
  const Outcome r = run_case(handle, stream, k, 41);
  ASSERT_EQ(r.matmul, CUBLAS_STATUS_SUCCESS);
  check_result(r, false);
}

// beta = 0: C is not read, so NaNs in it do not reach D.
TEST_F(CublasLt, BetaZeroDoesNotReadC) {
  const Case k = make_case(CUBLAS_OP_N, CUBLAS_OP_T, 4, 4, 4, 0);
  DeviceArray<float> nan_c(std::vector<float>(16, std::numeric_limits<float>::quiet_NaN()));
  const Outcome r =
      run_case(handle, stream, k, 51, [&](Descriptors&, Pointers& p) { p.c = nan_c.get(); });
  ASSERT_EQ(r.matmul, CUBLAS_STATUS_SUCCESS);
  check_result(r, false);
}

TEST_F(CublasLt, Bf16InputsAreWidenedExactly) {
  for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T})
    for (cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      Case k = make_case(ta, tb, 9, 7, 33, 1);
      k.a.type = k.b.type = CUDA_R_16BF;
      batch(k, 2);
      k.beta = -1.0f;
      const Outcome r = run_case(handle, stream, k, 61 + 2 * ta + tb);
      ASSERT_EQ(r.matmul, CUBLAS_STATUS_SUCCESS);
      check_result(r, false);
    }
}

// FAST_TF32: within the bound of the reference on TF32-rounded inputs, and far outside the same
// bound of the reference on the unrounded inputs (so the rounding did happen, to both operands).
TEST_F(CublasLt, Tf32RoundsBothInputsBeforeTheProduct) {
  Case k = make_case(CUBLAS_OP_N, CUBLAS_OP_T, 8, 8, 16, 1);
  k.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  k.beta = 0.5f;
  const Outcome r = run_case(handle, stream, k, 71);
  ASSERT_EQ(r.matmul, CUBLAS_STATUS_SUCCESS);
  EXPECT_LT(check_result(r, true), 1.0);
  EXPECT_GT(check_result(r, false, false), 10.0);  // unrounded inputs: errors ~2^-11, bound ~2^-20
}

// Ties round to even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10 (odd): down to 1;
// 1 + 3·2^-11 halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even): up. One product with 1.
TEST_F(CublasLt, Tf32TiesRoundToEven) {
  const float cases[][2] = {{1 + 0x1p-11f, 1.0f},
                            {1 + 3 * 0x1p-11f, 1 + 0x1p-9f},
                            {1 + 0x1p-11f + 0x1p-20f, 1 + 0x1p-10f},
                            {-(1 + 3 * 0x1p-11f), -(1 + 0x1p-9f)},
                            {1 + 0x1p-10f + 0x1p-12f, 1 + 0x1p-10f}};
  for (const auto& [input, rounded] : cases) {
    Case k = make_case(CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, 0);
    k.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    DeviceArray<float> a(std::vector<float>{input}), b(std::vector<float>{1.0f});
    const Outcome r = run_case(handle, stream, k, 81, [&](Descriptors&, Pointers& p) {
      p.a = a.get();
      p.b = b.get();
    });
    ASSERT_EQ(r.matmul, CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(r.d[0], rounded) << "input " << input;
    EXPECT_EQ(tf32(input), rounded);  // the test's own rounding agrees
  }
}

TEST_F(CublasLt, EmptyDepthScalesC) {
  Case k = make_case(CUBLAS_OP_N, CUBLAS_OP_N, 3, 2, 0, 0);
  k.a.ld = k.b.ld = 3;
  k.beta = -2.0f;
  const Outcome r = run_case(handle, stream, k, 91);
  ASSERT_EQ(r.matmul, CUBLAS_STATUS_SUCCESS);
  check_result(r, false);
}

TEST_F(CublasLt, HeuristicWorkspaceAndAttributes) {
  const Case k = make_case(CUBLAS_OP_N, CUBLAS_OP_N, 16, 8, 4, 0);
  Descriptors desc(k, 100);  // less than the split-K buffer the algorithm would like
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(handle, desc.op, desc.a, desc.b, desc.c, desc.d,
                                           desc.pref, 4, &result, &found),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(found, 1);
  EXPECT_EQ(result.state, CUBLAS_STATUS_SUCCESS);
  EXPECT_LE(result.workspaceSize, 100u);
  // Attributes read back as set, with their sizes.
  int32_t trans = -1;
  size_t written = 0;
  EXPECT_EQ(
      cublasLtMatmulDescGetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 0, &written),
      CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(written, sizeof(int32_t));
  EXPECT_EQ(cublasLtMatmulDescGetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans,
                                           sizeof trans, &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(trans, CUBLAS_OP_N);
  uint64_t max_workspace = 0;
  EXPECT_EQ(
      cublasLtMatmulPreferenceGetAttribute(desc.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &max_workspace, sizeof max_workspace, &written),
      CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(max_workspace, 100u);
  EXPECT_STREQ(cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_STRNE(cublasLtGetStatusString(CUBLAS_STATUS_INVALID_VALUE), "");
}

// ---- refused arguments: the documented status, and D untouched ----

// Runs a valid case with `tweak` applied and expects `status` from the heuristic (when
// `at_heuristic`) or the matmul, with D exactly as it was.
void expect_refused(cublasLtHandle_t handle, cudaStream_t stream, Case k, cublasStatus_t status,
                    bool at_heuristic, const std::function<void(Descriptors&, Pointers&)>& tweak) {
  const Outcome r = run_case(handle, stream, k, 99, tweak);
  if (at_heuristic) {
    EXPECT_EQ(r.heuristic, status);
    return;
  }
  EXPECT_EQ(r.heuristic, CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(r.matmul, status);
  EXPECT_EQ(r.d, r.d_initial);
}

TEST_F(CublasLt, ShapeMismatchesAreInvalid) {
  const Case ok = make_case(CUBLAS_OP_N, CUBLAS_OP_N, 4, 5, 3, 0);
  Case k = ok;  // op(A) 4x3 but op(B) 2x5
  k.b = col(2, 5);
  expect_refused(handle, stream, k, CUBLAS_STATUS_INVALID_VALUE, true, {});
  k = ok;  // transposing A makes op(A) 3x4
  k.ta = CUBLAS_OP_T;
  expect_refused(handle, stream, k, CUBLAS_STATUS_INVALID_VALUE, true, {});
  k = ok;  // C is 5x4
  k.c = col(5, 4);
  expect_refused(handle, stream, k, CUBLAS_STATUS_INVALID_VALUE, true, {});
  k = ok;  // D is 4x6
  k.d = col(4, 6);
  expect_refused(handle, stream, k, CUBLAS_STATUS_INVALID_VALUE, true, {});
  k = ok;  // batch counts differ
  batch(k, 2);
  k.b.batch = 3;
  expect_refused(handle, stream, k, CUBLAS_STATUS_INVALID_VALUE, true, {});
}

TEST_F(CublasLt, ImpossibleLeadingDimensionsAreInvalid) {
  Case k = make_case(CUBLAS_OP_N, CUBLAS_OP_N, 4, 5, 3, 0);
  k.a.ld = 3;  // below A's 4 rows
  expect_refused(handle, stream, k, CUBLAS_STATUS_INVALID_VALUE, true, {});
  k = make_case(CUBLAS_OP_N, CUBLAS_OP_N, 4, 5, 3, 0);
  k.c.order = CUBLASLT_ORDER_ROW;  // row order: ld must reach C's 5 columns
  k.c.ld = 4;
  expect_refused(handle, stream, k, CUBLAS_STATUS_INVALID_VALUE, true, {});
}

TEST_F(CublasLt, UnsupportedCombinationsAreNotSupported) {
  const Case ok = make_case(CUBLAS_OP_N, CUBLAS_OP_N, 4, 5, 3, 0);
  Case k = ok;  // TF32 takes fp32 inputs
  k.a.type = k.b.type = CUDA_R_16BF;
  k.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  expect_refused(handle, stream, k, CUBLAS_STATUS_NOT_SUPPORTED, true, {});
  k = ok;  // bf16 C and D with fp32 inputs: not in cuBLASLt's table for CUBLAS_COMPUTE_32F
  k.c.type = k.d.type = CUDA_R_16BF;
  expect_refused(handle, stream, k, CUBLAS_STATUS_NOT_SUPPORTED, true, {});
  k.a.type = k.b.type = CUDA_R_16BF;  // C's type is not D's
  k.c.type = CUDA_R_32F;
  expect_refused(handle, stream, k, CUBLAS_STATUS_NOT_SUPPORTED, true, {});
  k = ok;  // mixed inputs
  k.a.type = CUDA_R_16BF;
  expect_refused(handle, stream, k, CUBLAS_STATUS_NOT_SUPPORTED, true, {});
  k = ok;
  k.compute = CUBLAS_COMPUTE_64F;
  expect_refused(handle, stream, k, CUBLAS_STATUS_NOT_SUPPORTED, true, {});
  k = ok;
  k.a.order = CUBLASLT_ORDER_COL32;
  expect_refused(handle, stream, k, CUBLAS_STATUS_NOT_SUPPORTED, true, {});
  // An epilogue, set on the descriptor the heuristic is then asked about.
  Descriptors desc(ok, 0);
  const uint32_t relu = CUBLASLT_EPILOGUE_RELU;
  ASSERT_EQ(
      cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &relu, sizeof relu),
      CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(handle, desc.op, desc.a, desc.b, desc.c, desc.d,
                                           desc.pref, 1, &result, &found),
            CUBLAS_STATUS_NOT_SUPPORTED);
}

TEST_F(CublasLt, BadAttributesAndHandlesAreRefused) {
  const Case k = make_case(CUBLAS_OP_N, CUBLAS_OP_N, 4, 5, 3, 0);
  Descriptors desc(k, 0);
  const int64_t wide = 1;
  EXPECT_EQ(
      cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof wide),
      CUBLAS_STATUS_INVALID_VALUE);  // TRANSA is an int32_t
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 4),
            CUBLAS_STATUS_INVALID_VALUE);
  const int64_t narrow_batch = 2;
  EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(desc.a, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                             &narrow_batch, sizeof narrow_batch),
            CUBLAS_STATUS_INVALID_VALUE);  // BATCH_COUNT is an int32_t
  const uint32_t workspace32 = 5;
  EXPECT_EQ(
      cublasLtMatmulPreferenceSetAttribute(desc.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &workspace32, sizeof workspace32),
      CUBLAS_STATUS_INVALID_VALUE);  // a uint64_t
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(nullptr, desc.op, desc.a, desc.b, desc.c, desc.d,
                                           desc.pref, 1, &result, &found),
            CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(handle, desc.op, desc.a, desc.b, desc.c, desc.d,
                                           desc.pref, 0, &result, &found),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(handle, nullptr, desc.a, desc.b, desc.c, desc.d,
                                           desc.pref, 1, &result, &found),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(handle, desc.op, desc.a, nullptr, desc.c, desc.d,
                                           desc.pref, 1, &result, &found),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(handle, desc.op, desc.a, desc.b, desc.c, desc.d, nullptr,
                                           1, &result, &found),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtDestroy(nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
}

TEST_F(CublasLt, MatmulArgumentsAreChecked) {
  const Case ok = make_case(CUBLAS_OP_N, CUBLAS_OP_T, 4, 5, 3, 0);
  auto refused = [&](cublasStatus_t status, const std::function<void(Descriptors&, Pointers&)>& t) {
    expect_refused(handle, stream, ok, status, false, t);
  };
  refused(CUBLAS_STATUS_INVALID_VALUE, [](Descriptors&, Pointers& p) { p.alpha = nullptr; });
  refused(CUBLAS_STATUS_INVALID_VALUE, [](Descriptors&, Pointers& p) { p.beta = nullptr; });
  refused(CUBLAS_STATUS_INVALID_VALUE, [](Descriptors&, Pointers& p) { p.a = nullptr; });
  refused(CUBLAS_STATUS_INVALID_VALUE, [](Descriptors&, Pointers& p) { p.d = nullptr; });
  // A 4-byte aligned A where the preference promised the default 256.
  refused(CUBLAS_STATUS_INVALID_VALUE,
          [](Descriptors&, Pointers& p) { p.a = static_cast<const float*>(p.a) + 1; });
  // Workspace: smaller than the algorithm's, NULL, or not 256-byte aligned.
  refused(CUBLAS_STATUS_INVALID_VALUE, [](Descriptors&, Pointers& p) { p.workspace_bytes = 8; });
  refused(CUBLAS_STATUS_INVALID_VALUE, [](Descriptors&, Pointers& p) { p.workspace = nullptr; });
  refused(CUBLAS_STATUS_INVALID_VALUE, [](Descriptors&, Pointers& p) {
    p.workspace = static_cast<char*>(p.workspace) + 16;
    p.workspace_bytes -= 16;
  });
  // An algorithm found for fp32 used for a TF32 descriptor.
  refused(CUBLAS_STATUS_INVALID_VALUE, [](Descriptors& d, Pointers&) {
    const int32_t tf32 = CUBLAS_COMPUTE_32F_FAST_TF32;
    ASSERT_EQ(
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &tf32, sizeof tf32),
        CUBLAS_STATUS_SUCCESS);
  });
  // An algorithm that is no algorithm.
  static const cublasLtMatmulAlgo_t garbage{};
  refused(CUBLAS_STATUS_INVALID_VALUE, [](Descriptors&, Pointers& p) { p.algo = &garbage; });
  // In place (D is C, which beta != 0 reads) with a D layout of another leading dimension.
  Case reads_c = ok;
  reads_c.beta = 1.0f;
  expect_refused(handle, stream, reads_c, CUBLAS_STATUS_INVALID_VALUE, false,
                 [](Descriptors&, Pointers& p) { p.d = const_cast<void*>(p.c); });
  // No handle.
  expect_refused(handle, stream, ok, CUBLAS_STATUS_NOT_INITIALIZED, false,
                 [](Descriptors&, Pointers& p) { p.handle = nullptr; });
}

// The emulated device's faults: host memory and races end the process, naming the call.
TEST_F(CublasLt, HostPointersAndRacesFault) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Case k = make_case(CUBLAS_OP_N, CUBLAS_OP_N, 4, 5, 3, 0);
  alignas(256) static float host_a[12] = {};  // aligned as the preference promised
  EXPECT_DEATH(run_case(handle, stream, k, 5, [&](Descriptors&, Pointers& p) { p.a = host_a; }),
               "cublasLtMatmul: A .* is not device memory");
  // B's span is one element short of its allocation.
  EXPECT_DEATH(run_case(handle, stream, k, 5,
                        [&](Descriptors& d, Pointers&) {
                          const int64_t ld = 4;  // B is 3x5: span 4·4 + 3 = 19 > 15 elements
                          cublasLtMatrixLayoutSetAttribute(d.b, CUBLASLT_MATRIX_LAYOUT_LD, &ld,
                                                           sizeof ld);
                        }),
               "cublasLtMatmul: B .* is not device memory");
  // D and A in one device allocation, D starting where A starts.
  DeviceArray<float> shared{std::vector<float>(64, 0.0f)};
  EXPECT_DEATH(
      run_case(handle, stream, k, 5, [&](Descriptors&, Pointers& p) { p.a = p.d = shared.get(); }),
      "D overlaps A");
}

}  // namespace
