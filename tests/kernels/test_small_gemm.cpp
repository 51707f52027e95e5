// The register-blocked bf16 tile product of the attention kernels (kernels/cpu/small_gemm.h): each
// causal part equals the whole product, bit for bit, on what it promises.
#include <gtest/gtest.h>

#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/small_gemm.h"
#include "kernels/grad_check.h"

namespace boostlm {
namespace {

#ifdef __AVX512BF16__
using cpu::CausalPart;

// B [K, N] packed in pairs of k as small_gemm_bf16 reads it.
std::vector<bf16_t> pack_pairs(const std::vector<bf16_t>& b, int64_t K, int64_t N) {
  std::vector<bf16_t> packed(K * N);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) packed[(k / 2) * 2 * N + 2 * n + k % 2] = b[k * N + n];
  return packed;
}

std::vector<bf16_t> rounded(const std::vector<float>& x) {
  std::vector<bf16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = float_to_bf16(x[i]);
  return out;
}

TEST(SmallGemm, CausalPartsEqualTheWholeProductWhereTheyPromise) {
  // Tiles as attention runs them (64 x 128 and the transposed 128 x 64), ragged edges, and offsets
  // on, before and past the diagonal.
  struct Case {
    int64_t M, N, K;
  };
  for (const Case c : {Case{64, 128, 64}, Case{64, 64, 128}, Case{128, 64, 64}, Case{37, 48, 30}})
    for (const int64_t offset : {-20, 0, 5, 64, 200}) {
      const int64_t M = c.M, N = c.N, K = c.K;
      const auto b = pack_pairs(rounded(test_support::random_vector(K * N, 2)), K, N);
      const auto init = test_support::random_vector(M * N, 3);
      // A as each part presumes it: whole (cols), zero past k = i + offset (k_upto), zero before
      // k = i − offset (k_from).
      auto a_for = [&](CausalPart::Kind kind) {
        auto a = rounded(test_support::random_vector(M * K, 1));
        for (int64_t i = 0; i < M; ++i)
          for (int64_t k = 0; k < K; ++k)
            if ((kind == CausalPart::k_upto && k > i + offset) ||
                (kind == CausalPart::k_from && k < i - offset))
              a[i * K + k] = bf16_t{0};
        return a;
      };
      for (const auto kind : {CausalPart::cols, CausalPart::k_upto, CausalPart::k_from})
        for (const bool accumulate : {false, true}) {
          const auto a = a_for(kind);
          std::vector<float> whole = init, part = init;
          cpu::small_gemm_bf16(M, N, K, a.data(), K, b.data(), 2 * N, whole.data(), N, accumulate);
          cpu::small_gemm_bf16(M, N, K, a.data(), K, b.data(), 2 * N, part.data(), N, accumulate,
                               {kind, offset});
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
              if (kind == CausalPart::cols && j > i + offset) continue;  // masked: not promised
              ASSERT_EQ(part[i * N + j], whole[i * N + j])
                  << "kind " << kind << " offset " << offset << " accumulate " << accumulate
                  << " at " << i << "," << j;
            }
        }
    }
}
#else
TEST(SmallGemm, CausalPartsEqualTheWholeProductWhereTheyPromise) {
  GTEST_SKIP() << "no AVX512-BF16 here: the tiled bf16 kernels are not built";
}
#endif

}  // namespace
}  // namespace boostlm
