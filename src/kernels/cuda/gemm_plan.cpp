#include "kernels/cuda/gemm_plan.h"

#include <limits>
#include <sstream>

#include "core/error.h"

namespace boostlm::cuda {

const char* to_string(GemmPrecision precision) {
  switch (precision) {
    case GemmPrecision::f32:
      return "fp32";
    case GemmPrecision::tf32:
      return "tf32";
    case GemmPrecision::bf16:
      return "bf16";
  }
  return "?";
}

namespace {
// The row-major matrix op(X)[rows, cols] stored with row stride ld: stored [rows, cols] (N) or
// [cols, rows] (T) row-major, i.e. column-major [cols, rows] or [rows, cols] with the same ld.
LtMatrix stored_column_major(Trans trans, int64_t rows, int64_t cols, int64_t ld) {
  const LtMatrix m = trans == Trans::N ? LtMatrix{cols, rows, ld} : LtMatrix{rows, cols, ld};
  BOOSTLM_ASSERT_MSG(m.ld >= std::max<int64_t>(m.rows, 1),
                     "a GEMM operand's row stride is below its row width");
  return m;
}
}  // namespace

LtProblem column_major_problem(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K,
                               int64_t lda, int64_t ldb, int64_t ldc, const GemmBatch& batch) {
  BOOSTLM_ASSERT(M >= 0 && N >= 0 && K >= 0 && batch.count >= 1);
  BOOSTLM_ASSERT_MSG(batch.count <= std::numeric_limits<int32_t>::max(),
                     "cuBLASLt's batch count is an int32");
  LtProblem p;
  p.trans_a = trans_b;
  p.trans_b = trans_a;
  p.m = N;
  p.n = M;
  p.k = K;
  p.a = stored_column_major(trans_b, K, N, ldb);  // the call's op(B) is [K, N]
  p.b = stored_column_major(trans_a, M, K, lda);  // the call's op(A) is [M, K]
  p.c = stored_column_major(Trans::N, M, N, ldc);
  p.batch = batch.count;
  if (batch.count > 1) {
    p.stride_a = batch.stride_b;
    p.stride_b = batch.stride_a;
    p.stride_c = batch.stride_c;
  }
  return p;
}

uint32_t pointer_alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 1;
  while (alignment < 256 && address % (2 * alignment) == 0) alignment *= 2;
  return alignment;
}

std::size_t GemmKeyHash::operator()(const GemmKey& key) const {
  std::size_t h = 0;
  auto mix = [&h](uint64_t v) {
    h ^= std::hash<uint64_t>{}(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  };
  const LtProblem& p = key.problem;
  mix(static_cast<uint64_t>(key.precision));
  mix(static_cast<uint64_t>(p.trans_a) * 2 + static_cast<uint64_t>(p.trans_b));
  for (int64_t v : {p.m, p.n, p.k, p.a.rows, p.a.cols, p.a.ld, p.b.rows, p.b.cols, p.b.ld, p.c.rows,
                    p.c.cols, p.c.ld, p.batch, p.stride_a, p.stride_b, p.stride_c})
    mix(static_cast<uint64_t>(v));
  mix(key.reads_c);
  mix(key.bf16_out);
  mix(key.align_a);
  mix(key.align_b);
  mix(key.align_c);
  return h;
}

std::string describe(const GemmKey& key) {
  const LtProblem& p = key.problem;
  auto t = [](Trans x) { return x == Trans::N ? "N" : "T"; };
  std::ostringstream os;
  // Back in the caller's terms: A is cuBLASLt's B', B its A'.
  os << to_string(key.precision) << " GEMM M=" << p.n << " N=" << p.m << " K=" << p.k
     << " op(A)=" << t(p.trans_b) << " op(B)=" << t(p.trans_a) << " lda=" << p.b.ld
     << " ldb=" << p.a.ld << " ldc=" << p.c.ld;
  if (p.batch > 1)
    os << " batch=" << p.batch << " strides(A,B,C)=(" << p.stride_b << "," << p.stride_a << ","
       << p.stride_c << ")";
  os << " beta" << (key.reads_c ? "!=0" : "=0") << (key.bf16_out ? " C bf16" : "")
     << " align(A,B,C)=(" << key.align_b << "," << key.align_a << "," << key.align_c << ")";
  return os.str();
}

std::size_t gemm_workspace_bytes(int sm_major) {
  return sm_major >= 9 ? std::size_t{32} << 20 : std::size_t{4} << 20;
}

}  // namespace boostlm::cuda
