// The emulated cuBLASLt (issue 38): the subset the backend uses (kernels/cuda/gemm.cpp), with the
// signatures of the real <cublasLt.h>, computed on the CPU with oneDNN's dnnl_sgemm.
//
// D = alpha·op(A)·op(B) + beta·C over column-major (or row-major, CUBLASLT_ORDER_ROW) layouts with
// leading dimensions, strided batches, fp32 or bf16 A and B, fp32 C and D, compute type
// CUBLAS_COMPUTE_32F or CUBLAS_COMPUTE_32F_FAST_TF32 (A and B rounded to TF32, 10 explicit mantissa
// bits, to nearest even, before the product), fp32 alpha and beta on the host. Every operand is
// copied to a dense column-major fp32 matrix (bf16 widened exactly), and the column-major product
// is handed to dnnl_sgemm, which is row-major, by the usual swap: D^T = op(B)^T·op(A)^T.
//
// Arguments are checked as the cuBLASLt documentation states and refused with its statuses (a
// reason is printed on stderr); what a GPU would fault on or leave undefined is a fault of the
// emulated device (emulator.h): an operand, C, D or the workspace outside device memory, over the
// exact span its layout implies, batches included; D overlapping A, B or a C that is not D itself;
// members of a batched D overlapping each other. The product is enqueued on the stream and runs
// when it is drained.
//
// Not emulated (refused with CUBLAS_STATUS_NOT_SUPPORTED, as the real library refuses what it
// cannot run): other data and compute types, bf16 C/D, epilogues, device pointer modes, orders
// other than COL and ROW, pointer-array batches, planar complex.
#include <cublasLt.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"  // bf16 as the device stores it (rounded to nearest even, NaN kept)
#include "cuda_emulator/counters.h"
#include "emulator.h"

// The handle (cublasLtHandle_t points to this).
struct cublasLtContext {
  uint64_t magic;
};

namespace {

constexpr uint64_t kHandleMagic = 0x48746c42756d45ull;  // "EmuBltH"
constexpr uint64_t kLayoutMagic = 0x4c746c42756d45ull;
constexpr uint64_t kDescMagic = 0x44746c42756d45ull;
constexpr uint64_t kPrefMagic = 0x50746c42756d45ull;
constexpr uint64_t kAlgoMagic = 0x41746c42756d45ull;

constexpr uint32_t kDefaultAlignment = 256;     // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES
constexpr uintptr_t kWorkspaceAlignment = 256;  // cublasLtMatmul's workspace argument

// What the opaque descriptors hold. They are copied in and out of the opaque storage with memcpy,
// so the storage may also be the application's own (cublasLt*Init).
struct Layout {
  uint64_t magic;
  uint32_t type;  // cudaDataType
  int32_t order;  // cublasLtOrder_t
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch;
  uint32_t batch_mode;
  int64_t stride;  // elements
  int64_t plane_offset;
};
struct Desc {
  uint64_t magic;
  int32_t compute, scale, pointer_mode, trans_a, trans_b, trans_c, fill_mode;
  uint32_t epilogue;
};
struct Pref {
  uint64_t magic;
  uint32_t search_mode, reduction_mask;
  uint64_t max_workspace;
  uint32_t align_a, align_b, align_c, align_d;
  float max_waves;
  uint64_t impl_mask;
};
// The algorithm: the types it was found for, the workspace it uses and the alignments it assumes.
struct Algo {
  uint64_t magic;
  int32_t compute, scale;
  uint32_t a_type, b_type, c_type, d_type;
  uint64_t workspace;
  uint32_t align_a, align_b, align_c, align_d;
};
static_assert(sizeof(Layout) <= sizeof(cublasLtMatrixLayoutOpaque_t));
static_assert(sizeof(Desc) <= sizeof(cublasLtMatmulDescOpaque_t));
static_assert(sizeof(Pref) <= sizeof(cublasLtMatmulPreferenceOpaque_t));
static_assert(sizeof(Algo) <= sizeof(cublasLtMatmulAlgo_t));

template <typename T, typename Opaque>
bool load(const Opaque* opaque, uint64_t magic, T& out) {
  if (opaque == nullptr) return false;
  std::memcpy(&out, opaque, sizeof out);
  return out.magic == magic;
}
template <typename T, typename Opaque>
void store(Opaque* opaque, const T& value) {
  std::memcpy(opaque, &value, sizeof value);
}

cublasStatus_t refuse(cublasStatus_t status, const char* call, const std::string& why) {
  std::fprintf(stderr, "cuda emulator: %s: %s: %s\n", call, cublasLtGetStatusName(status),
               why.c_str());
  return status;
}

// Attribute storage: the size must be the attribute's own (the documented INVALID_VALUE).
template <typename T>
cublasStatus_t set_value(T& field, const void* buf, size_t size) {
  if (buf == nullptr || size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}
template <typename T>
cublasStatus_t get_value(const T& field, void* buf, size_t size, size_t* written) {
  if (size == 0) {
    if (written == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *written = sizeof(T);
    return CUBLAS_STATUS_SUCCESS;
  }
  if (buf == nullptr || size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(buf, &field, sizeof(T));
  if (written) *written = sizeof(T);
  return CUBLAS_STATUS_SUCCESS;
}

// Calls `visit` with the field of `attribute`, or returns NOT_SUPPORTED for one not emulated.
template <typename Visit>
cublasStatus_t layout_field(Layout& l, cublasLtMatrixLayoutAttribute_t attribute, Visit visit) {
  switch (attribute) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE:
      return visit(l.type);
    case CUBLASLT_MATRIX_LAYOUT_ORDER:
      return visit(l.order);
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
      return visit(l.rows);
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      return visit(l.cols);
    case CUBLASLT_MATRIX_LAYOUT_LD:
      return visit(l.ld);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return visit(l.batch);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return visit(l.stride);
    case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET:
      return visit(l.plane_offset);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_MODE:
      return visit(l.batch_mode);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

template <typename Visit>
cublasStatus_t desc_field(Desc& d, cublasLtMatmulDescAttributes_t attribute, Visit visit) {
  switch (attribute) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      return visit(d.compute);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      return visit(d.scale);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      return visit(d.pointer_mode);
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return visit(d.trans_a);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return visit(d.trans_b);
    case CUBLASLT_MATMUL_DESC_TRANSC:
      return visit(d.trans_c);
    case CUBLASLT_MATMUL_DESC_FILL_MODE:
      return visit(d.fill_mode);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return visit(d.epilogue);
    default:
      return refuse(
          CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulDesc*Attribute",
          "attribute " + std::to_string(static_cast<int>(attribute)) + " is not emulated");
  }
}

template <typename Visit>
cublasStatus_t pref_field(Pref& p, cublasLtMatmulPreferenceAttributes_t attribute, Visit visit) {
  switch (attribute) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE:
      return visit(p.search_mode);
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return visit(p.max_workspace);
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
      return visit(p.reduction_mask);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      return visit(p.align_a);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      return visit(p.align_b);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      return visit(p.align_c);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return visit(p.align_d);
    case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT:
      return visit(p.max_waves);
    case CUBLASLT_MATMUL_PREF_IMPL_MASK:
      return visit(p.impl_mask);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

Layout make_layout(cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld) {
  Layout l{};
  l.magic = kLayoutMagic;
  l.type = static_cast<uint32_t>(type);
  l.order = CUBLASLT_ORDER_COL;
  l.rows = rows;
  l.cols = cols;
  l.ld = ld;
  l.batch = 1;
  l.batch_mode = CUBLASLT_BATCH_MODE_STRIDED;
  return l;
}

Desc make_desc(cublasComputeType_t compute, cudaDataType_t scale) {
  Desc d{};
  d.magic = kDescMagic;
  d.compute = compute;
  d.scale = scale;
  d.pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  d.trans_a = d.trans_b = d.trans_c = CUBLAS_OP_N;
  d.fill_mode = CUBLAS_FILL_MODE_FULL;
  d.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  return d;
}

Pref make_pref() {
  Pref p{};
  p.magic = kPrefMagic;
  p.search_mode = CUBLASLT_SEARCH_BEST_FIT;
  p.reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
  p.align_a = p.align_b = p.align_c = p.align_d = kDefaultAlignment;
  p.impl_mask = ~uint64_t{0};
  return p;
}

std::size_t element_bytes(uint32_t type) {
  return type == CUDA_R_16BF ? 2 : 4;
}

// Elements from a member's first to one past its last, and from the first member's first to one
// past the last member's last.
int64_t member_span(const Layout& l) {
  if (l.rows == 0 || l.cols == 0) return 0;
  return l.order == CUBLASLT_ORDER_ROW ? static_cast<int64_t>(l.rows - 1) * l.ld + l.cols
                                       : static_cast<int64_t>(l.cols - 1) * l.ld + l.rows;
}
int64_t total_span(const Layout& l) {
  const int64_t member = member_span(l);
  return member == 0 ? 0 : static_cast<int64_t>(l.batch - 1) * l.stride + member;
}
int64_t offset(const Layout& l, int64_t row, int64_t col) {
  return l.order == CUBLASLT_ORDER_ROW ? row * l.ld + col : row + col * l.ld;
}

// The problem a descriptor and four layouts describe, checked.
struct Problem {
  Desc desc;
  Layout a, b, c, d;
  bool trans_a, trans_b;
  int64_t m, n, k;
};

std::string shape(const char* name, const Layout& l) {
  return std::string(name) + " " + std::to_string(l.rows) + "x" + std::to_string(l.cols);
}

cublasStatus_t check_layout(const char* call, const char* name, const Layout& l) {
  if (l.order != CUBLASLT_ORDER_COL && l.order != CUBLASLT_ORDER_ROW)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  std::string(name) + ": only CUBLASLT_ORDER_COL and _ROW are emulated");
  if (l.rows > INT32_MAX || l.cols > INT32_MAX)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, shape(name, l) + ": beyond int32");
  const uint64_t least = std::max<uint64_t>(1, l.order == CUBLASLT_ORDER_ROW ? l.cols : l.rows);
  if (l.ld < 0 || static_cast<uint64_t>(l.ld) < least)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  shape(name, l) + ": leading dimension " + std::to_string(l.ld) + " is below " +
                      std::to_string(least));
  if (l.batch < 1)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  std::string(name) + ": batch count " + std::to_string(l.batch));
  if (l.stride < 0)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  std::string(name) + ": negative batch stride " + std::to_string(l.stride));
  if (l.batch_mode != CUBLASLT_BATCH_MODE_STRIDED || l.plane_offset != 0)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  std::string(name) + ": pointer-array batches and planar complex not emulated");
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t check_problem(const char* call, cublasLtMatmulDesc_t desc_handle,
                             cublasLtMatrixLayout_t a_handle, cublasLtMatrixLayout_t b_handle,
                             cublasLtMatrixLayout_t c_handle, cublasLtMatrixLayout_t d_handle,
                             Problem& p) {
  if (!load(desc_handle, kDescMagic, p.desc))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "no valid matmul descriptor");
  const struct {
    const char* name;
    cublasLtMatrixLayout_t handle;
    Layout* layout;
  } layouts[] = {
      {"A", a_handle, &p.a}, {"B", b_handle, &p.b}, {"C", c_handle, &p.c}, {"D", d_handle, &p.d}};
  for (const auto& l : layouts) {
    if (!load(l.handle, kLayoutMagic, *l.layout))
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                    std::string("no valid layout for ") + l.name);
    if (cublasStatus_t s = check_layout(call, l.name, *l.layout); s != CUBLAS_STATUS_SUCCESS)
      return s;
  }
  const Desc& d = p.desc;
  auto op_ok = [](int32_t op) {
    return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
  };
  if (!op_ok(d.trans_a) || !op_ok(d.trans_b))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "TRANSA/TRANSB is not a cublasOperation_t");
  if (d.trans_c != CUBLAS_OP_N)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "TRANSC must be CUBLAS_OP_N");
  if (d.pointer_mode != CUBLASLT_POINTER_MODE_HOST)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "only host alpha and beta are emulated");
  if (d.epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "epilogues are not emulated");
  if (d.scale != CUDA_R_32F)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "only an fp32 scale type is emulated");
  // Real types: OP_C is OP_T.
  p.trans_a = d.trans_a != CUBLAS_OP_N;
  p.trans_b = d.trans_b != CUBLAS_OP_N;
  p.m = static_cast<int64_t>(p.trans_a ? p.a.cols : p.a.rows);
  p.k = static_cast<int64_t>(p.trans_a ? p.a.rows : p.a.cols);
  const auto kb = static_cast<int64_t>(p.trans_b ? p.b.cols : p.b.rows);
  p.n = static_cast<int64_t>(p.trans_b ? p.b.rows : p.b.cols);
  if (kb != p.k)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  "op(A) is " + std::to_string(p.m) + "x" + std::to_string(p.k) + " but op(B) is " +
                      std::to_string(kb) + "x" + std::to_string(p.n));
  for (const Layout* out : {&p.c, &p.d})
    if (static_cast<int64_t>(out->rows) != p.m || static_cast<int64_t>(out->cols) != p.n)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                    shape(out == &p.c ? "C" : "D", *out) + " is not op(A)·op(B)'s " +
                        std::to_string(p.m) + "x" + std::to_string(p.n));
  if (p.a.batch != p.d.batch || p.b.batch != p.d.batch || p.c.batch != p.d.batch)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "the four batch counts differ");
  // The types, as cuBLASLt's table of supported combinations has them for CUBLAS_COMPUTE_32F with
  // an fp32 scale: fp32 A/B with fp32 C/D; bf16 A/B with fp32 or bf16 C/D, C's type D's. (Real
  // cuBLASLt offers more; the emulator does not.)
  if (p.a.type != p.b.type || (p.a.type != CUDA_R_32F && p.a.type != CUDA_R_16BF))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  "A and B must both be CUDA_R_32F or both CUDA_R_16BF");
  if (p.c.type != p.d.type)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "C and D must be of one type");
  if (p.d.type != CUDA_R_32F && !(p.d.type == CUDA_R_16BF && p.a.type == CUDA_R_16BF))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  "C and D must be CUDA_R_32F, or CUDA_R_16BF with CUDA_R_16BF inputs");
  if (d.compute == CUBLAS_COMPUTE_32F_FAST_TF32 && p.a.type != CUDA_R_32F)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  "CUBLAS_COMPUTE_32F_FAST_TF32 takes CUDA_R_32F inputs");
  if (d.compute != CUBLAS_COMPUTE_32F && d.compute != CUBLAS_COMPUTE_32F_FAST_TF32)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call,
                  "only CUBLAS_COMPUTE_32F and CUBLAS_COMPUTE_32F_FAST_TF32 are emulated");
  return CUBLAS_STATUS_SUCCESS;
}

Algo make_algo(const Problem& p, const Pref& pref) {
  Algo algo{};
  algo.magic = kAlgoMagic;
  algo.compute = p.desc.compute;
  algo.scale = p.desc.scale;
  algo.a_type = p.a.type;
  algo.b_type = p.b.type;
  algo.c_type = p.c.type;
  algo.d_type = p.d.type;
  // Like a split-K kernel: a partial D in the workspace, where the preference allows one.
  algo.workspace = std::min<uint64_t>(pref.max_workspace, static_cast<uint64_t>(p.m * p.n) * 4);
  algo.align_a = pref.align_a;
  algo.align_b = pref.align_b;
  algo.align_c = pref.align_c;
  algo.align_d = pref.align_d;
  return algo;
}

uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 1;
  while (alignment < kDefaultAlignment && address % (2 * alignment) == 0) alignment *= 2;
  return alignment;
}

std::string range(const char* name, const void* p, int64_t bytes) {
  char text[96];
  std::snprintf(text, sizeof text, "%s [%p, +%lld bytes)", name, p, static_cast<long long>(bytes));
  return text;
}

// True when two members of the batch share an element.
bool members_overlap(const Layout& l) {
  const int64_t member = member_span(l);
  if (l.batch <= 1 || member == 0 || l.stride >= member) return false;
  if (l.stride == 0) return true;
  std::vector<bool> used(total_span(l), false);
  for (int32_t i = 0; i < l.batch; ++i)
    for (uint64_t r = 0; r < l.rows; ++r)
      for (uint64_t c = 0; c < l.cols; ++c) {
        const int64_t at = i * l.stride + offset(l, r, c);
        if (used[at]) return true;
        used[at] = true;
      }
  return false;
}

bool bytes_overlap(const void* x, int64_t x_bytes, const void* y, int64_t y_bytes) {
  if (x_bytes == 0 || y_bytes == 0) return false;
  const auto* xb = static_cast<const char*>(x);
  const auto* yb = static_cast<const char*>(y);
  return xb < yb + y_bytes && yb < xb + x_bytes;
}

// Rounds to TF32: 10 explicit mantissa bits, to nearest even (infinities and NaNs kept).
float round_to_tf32(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7f800000u) != 0x7f800000u) {
    bits += 0xfffu + ((bits >> 13) & 1u);
    bits &= ~0x1fffu;
  }
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// Member `member` of an operand as a dense column-major fp32 matrix (ld = rows).
std::vector<float> dense(const void* base, const Layout& l, int32_t member, bool tf32) {
  std::vector<float> out(l.rows * l.cols);
  const int64_t first = static_cast<int64_t>(member) * l.stride;
  for (uint64_t c = 0; c < l.cols; ++c)
    for (uint64_t r = 0; r < l.rows; ++r) {
      const int64_t at = first + offset(l, r, c);
      const float value = l.type == CUDA_R_16BF
                              ? boostlm::bf16_to_float(static_cast<const uint16_t*>(base)[at])
                              : static_cast<const float*>(base)[at];
      out[r + c * l.rows] = tf32 ? round_to_tf32(value) : value;
    }
  return out;
}

void scatter(const std::vector<float>& values, const Layout& l, int32_t member, void* base) {
  const int64_t first = static_cast<int64_t>(member) * l.stride;
  for (uint64_t c = 0; c < l.cols; ++c)
    for (uint64_t r = 0; r < l.rows; ++r) {
      const int64_t at = first + offset(l, r, c);
      const float value = values[r + c * l.rows];
      if (l.type == CUDA_R_16BF)
        static_cast<uint16_t*>(base)[at] = boostlm::float_to_bf16(value);
      else
        static_cast<float*>(base)[at] = value;
    }
}

struct Launch {
  Problem p;
  const void *a, *b;
  const void* c;  // of p.c's type, D's
  void* d;
  float alpha, beta;
  void* workspace;
  uint64_t workspace_used;
};

// The enqueued work: runs when the stream is drained, with device memory reachable.
void compute(const Launch& w) {
  const Problem& p = w.p;
  // The algorithm's scratch, as a GPU's would be overwritten: work that shares it sees NaNs.
  if (w.workspace_used) std::memset(w.workspace, 0xff, w.workspace_used);
  const bool tf32 = p.desc.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  for (int32_t i = 0; i < p.d.batch; ++i) {
    std::vector<float> acc =
        w.beta != 0.0f ? dense(w.c, p.c, i, false) : std::vector<float>(p.m * p.n, 0.0f);
    if (p.k > 0) {
      const std::vector<float> a = dense(w.a, p.a, i, tf32), b = dense(w.b, p.b, i, tf32);
      // Column-major D = op(A)·op(B) is row-major D^T = op(B)^T·op(A)^T: the operands swap, the
      // transposes stay.
      const dnnl_status_t status =
          dnnl_sgemm(p.trans_b ? 'T' : 'N', p.trans_a ? 'T' : 'N', p.n, p.m, p.k, w.alpha, b.data(),
                     std::max<int64_t>(1, p.b.rows), a.data(), std::max<int64_t>(1, p.a.rows),
                     w.beta, acc.data(), std::max<int64_t>(1, p.m));
      if (status != dnnl_success)
        cuda_emulator::fault("cublasLtMatmul: dnnl_sgemm failed with status " +
                             std::to_string(static_cast<int>(status)));
    } else {
      for (float& v : acc) v *= w.beta;  // an empty sum: D = beta·C
    }
    scatter(acc, p.d, i, w.d);
  }
}

}  // namespace

extern "C" {

const char* cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "the device lacks a required architectural feature";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the requested functionality is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "the requested functionality requires a license";
  }
  return "unknown status";
}

size_t cublasLtGetVersion(void) {
  return CUBLAS_VERSION;
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate", "lightHandle is NULL");
  *handle = new cublasLtContext{kHandleMagic};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (handle == nullptr || handle->magic != kHandleMagic)
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy", "no valid handle");
  handle->magic = 0;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

// ---- matrix layouts

cublasStatus_t cublasLtMatrixLayoutInit_internal(cublasLtMatrixLayout_t layout, size_t size,
                                                 cudaDataType type, uint64_t rows, uint64_t cols,
                                                 int64_t ld) {
  if (layout == nullptr || size < sizeof(Layout)) return CUBLAS_STATUS_ALLOC_FAILED;
  store(layout, make_layout(type, rows, cols, ld));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (layout == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutCreate", "matLayout is NULL");
  *layout = new cublasLtMatrixLayoutOpaque_t{};
  store(*layout, make_layout(type, rows, cols, ld));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  if (layout) std::memset(layout, 0, sizeof *layout);  // a use after this is refused
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attribute,
                                                const void* buf, size_t size) {
  Layout l;
  if (!load(layout, kLayoutMagic, l))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutSetAttribute",
                  "no valid layout");
  const cublasStatus_t status =
      layout_field(l, attribute, [&](auto& field) { return set_value(field, buf, size); });
  if (status == CUBLAS_STATUS_SUCCESS) store(layout, l);
  return status;
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attribute,
                                                void* buf, size_t size, size_t* written) {
  Layout l;
  if (!load(layout, kLayoutMagic, l)) return CUBLAS_STATUS_INVALID_VALUE;
  return layout_field(l, attribute,
                      [&](auto& field) { return get_value(field, buf, size, written); });
}

// ---- matmul descriptors

cublasStatus_t cublasLtMatmulDescInit_internal(cublasLtMatmulDesc_t desc, size_t size,
                                               cublasComputeType_t compute, cudaDataType_t scale) {
  if (desc == nullptr || size < sizeof(Desc)) return CUBLAS_STATUS_ALLOC_FAILED;
  store(desc, make_desc(compute, scale));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  if (desc == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescCreate", "matmulDesc is NULL");
  *desc = new cublasLtMatmulDescOpaque_t{};
  store(*desc, make_desc(compute, scale));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  if (desc) std::memset(desc, 0, sizeof *desc);
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attribute,
                                              const void* buf, size_t size) {
  Desc d;
  if (!load(desc, kDescMagic, d))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute",
                  "no valid descriptor");
  const cublasStatus_t status =
      desc_field(d, attribute, [&](auto& field) { return set_value(field, buf, size); });
  if (status == CUBLAS_STATUS_SUCCESS) store(desc, d);
  return status;
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attribute, void* buf,
                                              size_t size, size_t* written) {
  Desc d;
  if (!load(desc, kDescMagic, d)) return CUBLAS_STATUS_INVALID_VALUE;
  return desc_field(d, attribute,
                    [&](auto& field) { return get_value(field, buf, size, written); });
}

// ---- heuristic preferences

cublasStatus_t cublasLtMatmulPreferenceInit_internal(cublasLtMatmulPreference_t pref, size_t size) {
  if (pref == nullptr || size < sizeof(Pref)) return CUBLAS_STATUS_ALLOC_FAILED;
  store(pref, make_pref());
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate", "pref is NULL");
  *pref = new cublasLtMatmulPreferenceOpaque_t{};
  store(*pref, make_pref());
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  if (pref) std::memset(pref, 0, sizeof *pref);
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attribute,
                                                    const void* buf, size_t size) {
  Pref p;
  if (!load(pref, kPrefMagic, p))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceSetAttribute",
                  "no valid preference");
  const cublasStatus_t status =
      pref_field(p, attribute, [&](auto& field) { return set_value(field, buf, size); });
  if (status == CUBLAS_STATUS_SUCCESS) store(pref, p);
  return status;
}

cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attribute,
                                                    void* buf, size_t size, size_t* written) {
  Pref p;
  if (!load(pref, kPrefMagic, p)) return CUBLAS_STATUS_INVALID_VALUE;
  return pref_field(p, attribute,
                    [&](auto& field) { return get_value(field, buf, size, written); });
}

// ---- the heuristic: one algorithm for every problem the emulator runs

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a_desc,
    cublasLtMatrixLayout_t b_desc, cublasLtMatrixLayout_t c_desc, cublasLtMatrixLayout_t d_desc,
    cublasLtMatmulPreference_t preference, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned) {
  const char* call = "cublasLtMatmulAlgoGetHeuristic";
  if (handle == nullptr || handle->magic != kHandleMagic)
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, call, "no valid handle");
  if (requested <= 0)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "requestedAlgoCount must be positive");
  if (results == nullptr || returned == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "no result array or count");
  Pref pref;
  if (!load(preference, kPrefMagic, pref))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "no valid preference");
  *returned = 0;
  Problem p;
  if (cublasStatus_t s = check_problem(call, desc, a_desc, b_desc, c_desc, d_desc, p);
      s != CUBLAS_STATUS_SUCCESS)
    return s;
  cublasLtMatmulHeuristicResult_t result{};
  const Algo algo = make_algo(p, pref);
  store(&result.algo, algo);
  result.workspaceSize = algo.workspace;
  result.state = CUBLAS_STATUS_SUCCESS;
  result.wavesCount = 1.0f;
  results[0] = result;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t a_desc, const void* B,
                              cublasLtMatrixLayout_t b_desc, const void* beta, const void* C,
                              cublasLtMatrixLayout_t c_desc, void* D, cublasLtMatrixLayout_t d_desc,
                              const cublasLtMatmulAlgo_t* algo_in, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  const char* call = "cublasLtMatmul";
  if (handle == nullptr || handle->magic != kHandleMagic)
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, call, "no valid handle");
  Launch w{};
  Problem& p = w.p;
  if (cublasStatus_t s = check_problem(call, desc, a_desc, b_desc, c_desc, d_desc, p);
      s != CUBLAS_STATUS_SUCCESS)
    return s;
  if (alpha == nullptr || beta == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "alpha or beta is NULL");
  std::memcpy(&w.alpha, alpha, sizeof w.alpha);  // host pointer mode: read at the call
  std::memcpy(&w.beta, beta, sizeof w.beta);

  Algo algo;
  if (algo_in == nullptr) {  // the documented implicit heuristic query
    Pref pref = make_pref();
    pref.max_workspace = workspace_bytes;
    pref.align_a = alignment_of(A);
    pref.align_b = alignment_of(B);
    pref.align_c = alignment_of(C);
    pref.align_d = alignment_of(D);
    algo = make_algo(p, pref);
  } else if (!load(algo_in, kAlgoMagic, algo)) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "algo is not one the heuristic returned");
  } else if (algo.compute != p.desc.compute || algo.scale != p.desc.scale ||
             algo.a_type != p.a.type || algo.b_type != p.b.type || algo.c_type != p.c.type ||
             algo.d_type != p.d.type) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  "algo was found for other data or compute types");
  }
  if (workspace_bytes < algo.workspace)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  "workspaceSizeInBytes " + std::to_string(workspace_bytes) +
                      " is below the algorithm's " + std::to_string(algo.workspace));
  if (workspace_bytes > 0 && workspace == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "workspace is NULL");
  if (workspace_bytes > 0 && reinterpret_cast<uintptr_t>(workspace) % kWorkspaceAlignment != 0)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "workspace is not 256-byte aligned");

  const bool reads_c = w.beta != 0.0f;
  const int64_t a_bytes = total_span(p.a) * element_bytes(p.a.type);
  const int64_t b_bytes = total_span(p.b) * element_bytes(p.b.type);
  const int64_t c_bytes = reads_c ? total_span(p.c) * element_bytes(p.c.type) : 0;
  const int64_t d_bytes = total_span(p.d) * element_bytes(p.d.type);
  const struct {
    const char* name;
    const void* ptr;
    int64_t bytes;
    uint32_t alignment;
  } operands[] = {{"A", A, p.k > 0 ? a_bytes : 0, algo.align_a},
                  {"B", B, p.k > 0 ? b_bytes : 0, algo.align_b},
                  {"C", C, c_bytes, algo.align_c},
                  {"D", D, d_bytes, algo.align_d}};
  for (const auto& o : operands) {
    if (o.bytes == 0) continue;
    if (o.ptr == nullptr)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call, std::string(o.name) + " is NULL");
    if (alignment_of(o.ptr) < o.alignment)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                    range(o.name, o.ptr, o.bytes) + " is " + std::to_string(alignment_of(o.ptr)) +
                        "-byte aligned; the algorithm was chosen for " +
                        std::to_string(o.alignment) + " (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_" +
                        o.name + "_BYTES)");
  }
  if (C == D && reads_c && (p.c.ld != p.d.ld || p.c.order != p.d.order || p.c.stride != p.d.stride))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  "C is D (in place) but Cdesc and Ddesc differ in leading dimension, order or "
                  "batch stride");

  // What a GPU would fault on or race on.
  for (const auto& o : operands)
    if (o.bytes > 0 && !cuda_emulator::is_device_range(o.ptr, o.bytes))
      cuda_emulator::fault(std::string(call) + ": " + range(o.name, o.ptr, o.bytes) +
                           " is not device memory (not inside one live cudaMalloc allocation)");
  if (workspace_bytes > 0 && !cuda_emulator::is_device_range(workspace, workspace_bytes))
    cuda_emulator::fault(std::string(call) + ": " +
                         range("workspace", workspace, static_cast<int64_t>(workspace_bytes)) +
                         " is not device memory");
  for (int i = 0; i < 3; ++i)
    if (!(i == 2 && C == D) && bytes_overlap(operands[i].ptr, operands[i].bytes, D, d_bytes))
      cuda_emulator::fault(std::string(call) + ": D overlaps " + operands[i].name +
                           " (a race on a GPU)");
  if (members_overlap(p.d))
    cuda_emulator::fault(std::string(call) + ": members of the batched D overlap (a race)");

  if (p.m == 0 || p.n == 0) return CUBLAS_STATUS_SUCCESS;
  w.a = A;
  w.b = B;
  w.c = C;
  w.d = D;
  w.workspace = workspace;
  w.workspace_used = algo.workspace;
  // The counters (cuda_emulator/counters.h): bf16 operands, or a compute type that rounds to a
  // tensor-core format, run on the tensor cores; fp32 with CUBLAS_COMPUTE_32F does not.
  const bool tensor = p.a.type == CUDA_R_16BF || p.a.type == CUDA_R_16F ||
                      p.desc.compute == CUBLAS_COMPUTE_32F_FAST_16BF ||
                      p.desc.compute == CUBLAS_COMPUTE_32F_FAST_16F ||
                      p.desc.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  const int32_t batch = std::max<int32_t>(p.d.batch, 1);
  const uint64_t flops = 2ull * static_cast<uint64_t>(p.m) * static_cast<uint64_t>(p.n) *
                         static_cast<uint64_t>(p.k) * static_cast<uint64_t>(batch);
  // Global memory the matmul moves at least: its operands once (a GPU's tiles may read A and B
  // more than once from L2, not from memory).
  cuda_emulator::KernelCounters counted;
  counted.launches = 1;
  counted.m = p.m;
  counted.n = p.n;
  counted.k = p.k;
  counted.kernel = std::string("cublasLtMatmul ") + (tensor ? "tensor " : "fp32 ") +
                   std::to_string(p.m) + "x" + std::to_string(p.n) + "x" + std::to_string(p.k) +
                   (batch > 1 ? " batch " + std::to_string(batch) : "");
  (tensor ? counted.tensor_flops : counted.other_flops) = flops;
  counted.bytes_read = static_cast<uint64_t>(operands[0].bytes + operands[1].bytes +
                                             (reads_c ? operands[2].bytes : 0));
  counted.bytes_written = static_cast<uint64_t>(d_bytes);
  cuda_emulator::enqueue(stream, call, [w, counted] {
    if (!cuda_emulator::count_only()) compute(w);
    cuda_emulator::count_library_call(counted);
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
