// The host-side parts of the CUDA attention, cross-entropy and split/online RMSNorm, which run
// without a GPU: launch geometry, shared memory and workspace sizes (plans.h), and the per-row
// arithmetic the kernels share with the CPU backend (kernels/math.h), checked against definitions
// and finite differences. The online-softmax recurrence the flash kernels run per key tile is
// replayed here on the host with the same functions and compared to the two-pass softmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include "core/rng.h"
#include "kernels/attention.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/plans.h"
#include "kernels/math.h"
#include "plan/memory.h"
#include "plan/workload.h"

namespace boostlm::cuda {
namespace {

std::vector<float> normals(int64_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = scale * rng.normal();
  return v;
}

// ---- plans.h

TEST(AttentionPlan, HeadChunksRoundUpToACompiledSize) {
  EXPECT_EQ(attention_head_chunks(1), 1);
  EXPECT_EQ(attention_head_chunks(32), 1);
  EXPECT_EQ(attention_head_chunks(33), 2);
  EXPECT_EQ(attention_head_chunks(64), 2);
  EXPECT_EQ(attention_head_chunks(65), 4);  // 3 chunks run as 4 (the 4th masked)
  EXPECT_EQ(attention_head_chunks(128), 4);
  EXPECT_EQ(attention_head_chunks(129), 8);
  EXPECT_EQ(attention_head_chunks(256), 8);
  EXPECT_EQ(attention_head_chunks(257), 0);
  EXPECT_EQ(attention_head_chunks(0), 0);
  // Every head_dim in range: the chunks cover it, and half of them would not.
  for (int64_t hd = 1; hd <= kAttnMaxHeadDim; ++hd) {
    const int chunks = attention_head_chunks(hd);
    EXPECT_GE(32 * chunks, hd);
    if (chunks > 1) {
      EXPECT_LT(16 * chunks, hd);
    }
  }
}

TEST(AttentionPlan, GridsCoverTheTilesHeadsAndBatch) {
  const AttentionShape s{3, 100, 8, 2, 64};
  const AttentionGeometry f = attention_launch(s, AttentionKernel::forward);
  EXPECT_EQ(f.grid_x, 4);  // ceil(100 / 32) query tiles
  EXPECT_EQ(f.grid_y, 8);
  EXPECT_EQ(f.grid_z, 3);
  EXPECT_EQ(f.block, 256);
  EXPECT_EQ(f.head_chunks, 2);
  const AttentionGeometry kv = attention_launch(s, AttentionKernel::backward_dkdv);
  EXPECT_EQ(kv.grid_x, 4);  // key tiles
  EXPECT_EQ(kv.grid_y, 2);  // kv heads: a block sums over its group's query heads
  EXPECT_EQ(kv.grid_z, 3);
  const AttentionGeometry dq = attention_launch(s, AttentionKernel::backward_dq);
  EXPECT_EQ(dq.grid_x, 4);
  EXPECT_EQ(dq.grid_y, 8);
  // One token: one tile.
  EXPECT_EQ(attention_launch({1, 1, 1, 1, 8}, AttentionKernel::forward).grid_x, 1);
  EXPECT_EQ(attention_launch({1, 32, 1, 1, 8}, AttentionKernel::forward).grid_x, 1);
  EXPECT_EQ(attention_launch({1, 33, 1, 1, 8}, AttentionKernel::forward).grid_x, 2);
}

// The shared memory each kernel takes, float by float: Q [32, hd], K and V [32, hd + 1], P (and
// dS) [32, 32], the rows' lse and delta [32]; at head_dim 256 the largest fits an A100's 163 KiB.
TEST(AttentionPlan, SharedMemoryIsTheTilesAndFitsSm80) {
  for (int64_t hd : {1, 16, 40, 64, 100, 128, 256}) {
    SCOPED_TRACE(hd);
    const AttentionShape s{1, 64, 2, 1, hd};
    const size_t kv = 2 * 32 * (hd + 1), scores = 32 * 32;
    EXPECT_EQ(attention_launch(s, AttentionKernel::forward).shared_bytes,
              4 * (32 * hd + kv + scores));
    EXPECT_EQ(attention_launch(s, AttentionKernel::backward_dkdv).shared_bytes,
              4 * (2 * 32 * hd + kv + 2 * scores + 64));
    EXPECT_EQ(attention_launch(s, AttentionKernel::backward_dq).shared_bytes,
              4 * (2 * 32 * hd + kv + scores + 64));
    for (auto kernel :
         {AttentionKernel::forward, AttentionKernel::backward_dkdv, AttentionKernel::backward_dq})
      EXPECT_LE(attention_launch(s, kernel).shared_bytes, kMaxSharedBytesSm80);
  }
  // Small heads need no opt-in above the default 48 KiB.
  EXPECT_LE(attention_launch({1, 64, 2, 1, 64}, AttentionKernel::backward_dkdv).shared_bytes,
            kDefaultSharedBytes);
}

TEST(AttentionPlan, RejectsShapesTheKernelsDoNotTake) {
  EXPECT_DEATH(attention_launch({1, 8, 3, 2, 64}, AttentionKernel::forward), "n_kv_heads");
  EXPECT_DEATH(attention_launch({1, 8, 2, 1, 257}, AttentionKernel::forward), "head_dim");
}

TEST(AttentionPlan, BackwardWorkspaceIsOneFloatPerQueryRowAndHead) {
  EXPECT_EQ(attention_backward_workspace_bytes({2, 100, 8, 2, 64}), 2u * 100 * 8 * 4);
  // The tiles' stride: one float of padding per key row.
  EXPECT_EQ(attention_kv_tile_stride(64), 65);
}

// The tensor-core backward's dS tiles: per unit (sequence, kv head) the tile pairs on or below the
// diagonal for each query head of the group, chunks balanced under the 512 MiB bound (the dQ
// grid's y within CUDA's limit too), none past it; and the planner counts the same bytes.
TEST(AttentionPlan, DsTilesComeInBalancedChunksUnderTheirBound) {
  const AttentionShape s{4, 4096, 32, 32, 64};  // the 1B shape at the paper's micro-batch
  EXPECT_EQ(attention_ds_unit_bytes(s), 64u * 65 / 2 * 64 * 64 * 2);  // 17 MB
  EXPECT_EQ(attention_ds_chunk_units(s), 26);  // 128 units, 30 fit: 5 chunks of 26 (the last 24)
  EXPECT_EQ(attention_ds_chunk_units({1, 4096, 32, 32, 64}), 16);  // 32 units: 2 chunks of 16
  EXPECT_EQ(attention_ds_chunk_units({1, 64, 8, 2, 64}), 2);       // all at once
  EXPECT_EQ(attention_ds_chunk_units({1, 65536, 1, 1, 64}), 0);    // 4 GiB a unit: recompute
  // 131 072 units of 16 KiB: 32 768 fit the bound, 32 767 the grid's y: 5 chunks of 26 215.
  EXPECT_EQ(attention_ds_chunk_units({1024, 64, 256, 128, 16}), 26215);
  AttentionShape fp32 = s;
  EXPECT_EQ(attention_backward_workspace_bytes(fp32), 4u * 4096 * 32 * 4);  // delta alone
  fp32.compute = DType::bf16;
  EXPECT_EQ(attention_backward_workspace_bytes(fp32),
            4u * 4096 * 32 * 4 + 26 * attention_ds_unit_bytes(s));

  for (const auto& [batch, seq, tp] :
       {std::tuple{4, 4096, 1}, {1, 4096, 2}, {8, 1024, 4}, {2, 65536, 1}, {3, 100, 1}}) {
    plan::MicroBatchShape mb;
    mb.config.d_model = 2048;
    mb.config.n_heads = 32;
    mb.config.n_kv_heads = 8;
    mb.batch = batch;
    mb.seq_len = seq;
    mb.tp = tp;
    const AttentionShape local{batch, seq, 32 / tp, 8 / tp, 64};
    EXPECT_EQ(
        plan::attention_ds_scratch_bytes(mb),
        static_cast<int64_t>(attention_ds_chunk_units(local) * attention_ds_unit_bytes(local)))
        << batch << " x " << seq << " at tp " << tp;
  }
}

TEST(CrossEntropyPlan, RowChunksCoverTheRowsInOrder) {
  EXPECT_EQ(row_chunks(10, 4), (std::vector<RowChunk>{{0, 4}, {4, 4}, {8, 2}}));
  EXPECT_EQ(row_chunks(8, 4), (std::vector<RowChunk>{{0, 4}, {4, 4}}));
  EXPECT_EQ(row_chunks(3, 100), (std::vector<RowChunk>{{0, 3}}));
  EXPECT_TRUE(row_chunks(0, 4).empty());
}

TEST(CrossEntropyPlan, WorkspaceIsOneChunkOfLogitsAndItsLse) {
  LinearCrossEntropyShape s;
  s.rows = 1000;
  s.d = 64;
  s.V = 32000;
  s.chunk_rows = 128;
  EXPECT_EQ(linear_cross_entropy_workspace_bytes(s), 4u * (128 * 32000 + 128));
  s.rows = 50;  // fewer rows than a chunk: the workspace shrinks to them
  EXPECT_EQ(linear_cross_entropy_workspace_bytes(s), 4u * (50 * 32000 + 50));
}

// ---- kernels/math.h: the shared per-row arithmetic.

// The online (max, Σexp) pair, fed one value at a time or merged from pieces in any split, is the
// two-pass max and Σ exp(x − max) (to fp32 rounding over 1000 terms).
TEST(SharedMath, OnlineMaxSumExpIsTheTwoPassOne) {
  const auto x = normals(1000, 7, 5.0f);
  double max = -INFINITY;
  for (float v : x) max = std::max<double>(max, v);
  double sum = 0;
  for (float v : x) sum += std::exp(v - max);

  math::MaxSumExp one{-INFINITY, 0.0f};
  for (float v : x) one = math::add_to_max_sum_exp(one, v);
  EXPECT_EQ(one.max, static_cast<float>(max));
  EXPECT_NEAR(one.sum, sum, 1e-5 * sum);

  for (int64_t pieces : {2, 7, 32}) {  // as threads, then a block reduction, would split it
    std::vector<math::MaxSumExp> part(pieces, {-INFINITY, 0.0f});
    for (size_t i = 0; i < x.size(); ++i)
      part[i % pieces] = math::add_to_max_sum_exp(part[i % pieces], x[i]);
    math::MaxSumExp merged{-INFINITY, 0.0f};
    for (const auto& p : part) merged = math::merge_max_sum_exp(merged, p);
    EXPECT_EQ(merged.max, static_cast<float>(max));
    EXPECT_NEAR(merged.sum, sum, 1e-5 * sum) << pieces;
  }
  // The empty pair is the identity on either side, and two empties stay empty (no NaN).
  const math::MaxSumExp a{1.5f, 3.0f}, empty{-INFINITY, 0.0f};
  EXPECT_EQ(math::merge_max_sum_exp(a, empty).max, 1.5f);
  EXPECT_EQ(math::merge_max_sum_exp(empty, a).sum, 3.0f);
  const math::MaxSumExp none = math::merge_max_sum_exp(empty, empty);
  EXPECT_EQ(none.max, -INFINITY);
  EXPECT_EQ(none.sum, 0.0f);
}

TEST(SharedMath, CrossEntropyLossIsLogSumExpLessTheTarget) {
  const auto x = normals(50, 3, 4.0f);
  math::MaxSumExp st{-INFINITY, 0.0f};
  for (float v : x) st = math::add_to_max_sum_exp(st, v);
  double ref = 0;
  for (float v : x) ref += std::exp(static_cast<double>(v));
  ref = std::log(ref);
  EXPECT_NEAR(math::xent_lse(st.max, st.sum), ref, 1e-5);
  EXPECT_NEAR(math::xent_loss(st.max, st.sum, x[17]), ref - x[17], 1e-5);
  // The same operations in the same order as lse − target (the CPU's unfused forward).
  EXPECT_EQ(math::xent_loss(st.max, st.sum, x[17]), math::xent_lse(st.max, st.sum) - x[17]);
}

// Online softmax over key tiles, as flash_forward_kernel runs it for one query row (running max,
// correction of the accumulated output and sum), equals the two-pass softmax-weighted sum, and its
// lse = max + log(sum) the row's log-sum-exp. Causal rows, and a first tile whose scores are all
// below later ones (the correction then rescales everything).
TEST(SharedMath, OnlineSoftmaxOverTilesIsTheSoftmax) {
  const int64_t n = 100, hd = 3, tile = 32;
  auto s = normals(n, 11, 3.0f);
  for (int64_t j = 0; j < tile; ++j) s[j] -= 10.0f;
  const auto v = normals(n * hd, 12);
  float run_max = -INFINITY, run_sum = 0.0f;
  std::vector<float> acc(hd, 0.0f);
  for (int64_t j0 = 0; j0 < n; j0 += tile) {
    float tile_max = -INFINITY;
    for (int64_t j = j0; j < std::min(n, j0 + tile); ++j) tile_max = std::max(tile_max, s[j]);
    const float new_max = math::attention_new_max(run_max, tile_max);
    const float corr = math::attention_correction(run_max, new_max);
    float sum = 0.0f;
    for (auto& a : acc) a *= corr;
    for (int64_t j = j0; j < std::min(n, j0 + tile); ++j) {
      const float p = std::exp(s[j] - new_max);
      sum += p;
      for (int64_t c = 0; c < hd; ++c) acc[c] += p * v[j * hd + c];
    }
    run_sum = run_sum * corr + sum;
    run_max = new_max;
  }
  double max = -INFINITY, z = 0;
  for (float x : s) max = std::max<double>(max, x);
  for (float x : s) z += std::exp(x - max);
  EXPECT_NEAR(run_max + std::log(run_sum), max + std::log(z), 1e-5);
  for (int64_t c = 0; c < hd; ++c) {
    double o = 0;
    for (int64_t j = 0; j < n; ++j) o += std::exp(s[j] - max) / z * v[j * hd + c];
    EXPECT_NEAR(acc[c] / run_sum, o, 1e-5) << c;
  }
  // A row with no key yet: the correction is 1, never exp(−inf + inf).
  EXPECT_EQ(math::attention_correction(-INFINITY, -INFINITY), 1.0f);
  EXPECT_EQ(math::attention_correction(-INFINITY, 2.0f), 0.0f);
}

// dS = p · (dP − delta) · scale, with delta = Σ dO ⊙ O, is ∂L/∂(q·k) for L = Σ g ⊙ O, O = softmax(
// scale · q·k) V: checked by central differences on the unscaled scores of one row.
TEST(SharedMath, AttentionDscoreMatchesFiniteDifferences) {
  const int64_t n = 9, hd = 4;
  const float scale = 0.5f;
  const auto raw = normals(n, 21), v = normals(n * hd, 22), g = normals(hd, 23);
  auto loss = [&](const std::vector<double>& x) {  // in double
    double max = -1e300, z = 0;
    for (double t : x) max = std::max(max, scale * t);
    for (double t : x) z += std::exp(scale * t - max);
    double l = 0;
    for (int64_t c = 0; c < hd; ++c) {
      double o = 0;
      for (int64_t j = 0; j < n; ++j) o += std::exp(scale * x[j] - max) / z * v[j * hd + c];
      l += g[c] * o;
    }
    return l;
  };
  // Forward in fp32 as the kernels do: lse, O, delta; then dS per score.
  float max = -INFINITY, z = 0.0f;
  for (float t : raw) max = std::max(max, scale * t);
  for (float t : raw) z += std::exp(scale * t - max);
  const float lse = max + std::log(z);
  std::vector<float> out(hd, 0.0f);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < hd; ++c)
      out[c] += math::attention_probability(scale * raw[j], lse) * v[j * hd + c];
  float delta = 0.0f;
  for (int64_t c = 0; c < hd; ++c) delta += g[c] * out[c];
  std::vector<double> x(raw.begin(), raw.end());
  for (int64_t j = 0; j < n; ++j) {
    const float p = math::attention_probability(scale * raw[j], lse);
    float dp = 0.0f;
    for (int64_t c = 0; c < hd; ++c) dp += g[c] * v[j * hd + c];
    const float ds = math::attention_dscore(p, dp, delta, scale);
    const double h = 1e-4, keep = x[j];
    x[j] = keep + h;
    const double up = loss(x);
    x[j] = keep - h;
    const double down = loss(x);
    x[j] = keep;
    EXPECT_NEAR(ds, (up - down) / (2 * h), 1e-4) << j;
  }
}

// Online-RMSNorm's ds = −(Σ dz ⊙ z) · rstd² / (2D) is ∂L/∂(Σx²) for z = P · rstd(Σx²), L = Σ g ⊙ z
// (central differences); rms_of is 1/rstd; the RMSNorm dx element is rstd·γ·dy − c·x.
TEST(SharedMath, OnlineNormStatisticGradientMatchesFiniteDifferences) {
  const int64_t D = 48, width = 5;
  const float eps = 1e-5f;
  const auto p = normals(width, 31), g = normals(width, 32);
  const double sum_sq = 37.0;
  auto loss = [&](double ss) {
    const double r = 1.0 / std::sqrt(ss / D + eps);
    double l = 0;
    for (int64_t c = 0; c < width; ++c) l += g[c] * p[c] * r;
    return l;
  };
  const float rstd = math::rms_rstd(static_cast<float>(sum_sq), D, eps);
  float dot = 0.0f;
  for (int64_t c = 0; c < width; ++c) dot += g[c] * p[c] * rstd;
  const double h = 1e-3;
  EXPECT_NEAR(math::online_norm_stat_grad(dot, rstd, D),
              (loss(sum_sq + h) - loss(sum_sq - h)) / (2 * h), 1e-6);
  EXPECT_NEAR(math::rms_of(37.0f, D, eps) * rstd, 1.0f, 1e-6);
  // RMSNorm's dx element and the online dx are the CPU kernels' expressions (bit for bit).
  EXPECT_EQ(math::rms_backward_element(0.3f, -1.2f, 0.7f, 2.0f, 0.05f),
            2.0f * 0.7f * 0.3f - 0.05f * -1.2f);
  EXPECT_EQ(math::online_norm_dx(1.0f, 0.0f, 0.5f, 2.0f, -0.25f, 4.0f),
            0.5f * 2.0f + -0.25f * 4.0f);
  EXPECT_EQ(math::online_norm_dx(1.0f, 1.0f, 0.5f, 2.0f, -0.25f, 4.0f),
            1.0f + 0.5f * 2.0f + -0.25f * 4.0f);
}

// The flash kernels' decomposition replayed on the host with their tiles, loop bounds, masks and
// shared per-score functions (not their threads): the forward over key tiles j0 < i0 + rows of
// each query tile; dK/dV per key tile, summing the group's heads over the query tiles from
// j0 / 32 · 32 on; dQ per query tile over its key tiles. Against the CPU backend's fused attention
// on ragged lengths with GQA: a wrong tile range, mask or head mapping shows as a gradient off by
// whole terms (fp32 sums in other orders: 1e-4 absolute plus 1e-4 relative).
TEST(AttentionPlan, TheKernelsTileDecompositionIsTheCpuAttention) {
  for (const AttentionShape s : {AttentionShape{2, 70, 4, 2, 8}, AttentionShape{1, 33, 3, 1, 5},
                                 AttentionShape{1, 1, 2, 2, 4}}) {
    SCOPED_TRACE(::testing::Message() << s.seq_len << " " << s.n_heads << "/" << s.n_kv_heads);
    const int64_t T = s.seq_len, hd = s.head_dim, H = s.n_heads, group = H / s.n_kv_heads;
    const int64_t qd = H * hd, kd = s.n_kv_heads * hd, N = s.batch * T;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const auto q = normals(N * qd, 41), k = normals(N * kd, 42), v = normals(N * kd, 43),
               dout = normals(N * qd, 44);
    auto dot = [&](const float* a, const float* b) {
      float acc = 0.0f;
      for (int64_t c = 0; c < hd; ++c) acc += a[c] * b[c];
      return acc;
    };
    auto qrow = [&](int64_t b, int64_t i, int64_t h) {
      return q.data() + (b * T + i) * qd + h * hd;
    };
    auto krow = [&](int64_t b, int64_t j, int64_t h) {
      return k.data() + (b * T + j) * kd + (h / group) * hd;
    };
    auto vrow = [&](int64_t b, int64_t j, int64_t h) {
      return v.data() + (b * T + j) * kd + (h / group) * hd;
    };
    auto dorow = [&](int64_t b, int64_t i, int64_t h) {
      return dout.data() + (b * T + i) * qd + h * hd;
    };
    std::vector<float> out(N * qd), lse(s.batch * H * T), delta(s.batch * H * T);
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i0 = 0; i0 < T; i0 += kAttnQueryTile) {
          const int64_t rows = std::min<int64_t>(kAttnQueryTile, T - i0);
          for (int64_t i = i0; i < i0 + rows; ++i) {
            float run_max = -INFINITY, run_sum = 0.0f;
            std::vector<float> acc(hd, 0.0f);
            for (int64_t j0 = 0; j0 < i0 + rows; j0 += kAttnKeyTile) {
              std::vector<float> sc(kAttnKeyTile, -INFINITY);
              float tile_max = -INFINITY;
              for (int64_t j = j0; j < j0 + kAttnKeyTile; ++j)
                if (j <= i) {
                  sc[j - j0] = dot(qrow(b, i, h), krow(b, j, h)) * scale;
                  tile_max = std::max(tile_max, sc[j - j0]);
                }
              const float new_max = math::attention_new_max(run_max, tile_max);
              const float corr = math::attention_correction(run_max, new_max);
              float sum = 0.0f;
              for (auto& a : acc) a *= corr;
              for (int64_t j = j0; j < j0 + kAttnKeyTile; ++j) {
                if (j > i) continue;
                const float p = std::exp(sc[j - j0] - new_max);
                sum += p;
                for (int64_t c = 0; c < hd; ++c) acc[c] += p * vrow(b, j, h)[c];
              }
              run_sum = run_sum * corr + sum;
              run_max = new_max;
            }
            for (int64_t c = 0; c < hd; ++c) out[(b * T + i) * qd + h * hd + c] = acc[c] / run_sum;
            lse[(b * H + h) * T + i] = run_max + std::log(run_sum);
            delta[(b * H + h) * T + i] =
                dot(dorow(b, i, h), out.data() + (b * T + i) * qd + h * hd);
          }
        }
    auto p_ds = [&](int64_t b, int64_t i, int64_t j, int64_t h, float& p, float& ds) {
      const int64_t stat = (b * H + h) * T + i;
      p = math::attention_probability(dot(qrow(b, i, h), krow(b, j, h)) * scale, lse[stat]);
      ds = math::attention_dscore(p, dot(dorow(b, i, h), vrow(b, j, h)), delta[stat], scale);
    };
    std::vector<float> dq(N * qd, 9.0f), dk(N * kd, 9.0f), dv(N * kd, 9.0f);
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t kvh = 0; kvh < s.n_kv_heads; ++kvh)
        for (int64_t j0 = 0; j0 < T; j0 += kAttnKeyTile)
          for (int64_t j = j0; j < std::min<int64_t>(T, j0 + kAttnKeyTile); ++j) {
            std::vector<float> ak(hd, 0.0f), av(hd, 0.0f);
            for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h)
              for (int64_t i0 = j0 / kAttnQueryTile * kAttnQueryTile; i0 < T; i0 += kAttnQueryTile)
                for (int64_t i = i0; i < std::min<int64_t>(T, i0 + kAttnQueryTile); ++i) {
                  if (j > i) continue;
                  float p, ds;
                  p_ds(b, i, j, h, p, ds);
                  for (int64_t c = 0; c < hd; ++c) {
                    av[c] += p * dorow(b, i, h)[c];
                    ak[c] += ds * qrow(b, i, h)[c];
                  }
                }
            std::copy(ak.begin(), ak.end(), dk.begin() + (b * T + j) * kd + kvh * hd);
            std::copy(av.begin(), av.end(), dv.begin() + (b * T + j) * kd + kvh * hd);
          }
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i0 = 0; i0 < T; i0 += kAttnQueryTile) {
          const int64_t rows = std::min<int64_t>(kAttnQueryTile, T - i0);
          for (int64_t i = i0; i < i0 + rows; ++i) {
            std::vector<float> acc(hd, 0.0f);
            for (int64_t j0 = 0; j0 < i0 + rows; j0 += kAttnKeyTile)
              for (int64_t j = j0; j < std::min<int64_t>(T, j0 + kAttnKeyTile); ++j) {
                if (j > i) continue;
                float p, ds;
                p_ds(b, i, j, h, p, ds);
                for (int64_t c = 0; c < hd; ++c) acc[c] += ds * krow(b, j, h)[c];
              }
            std::copy(acc.begin(), acc.end(), dq.begin() + (b * T + i) * qd + h * hd);
          }
        }

    std::vector<float> cpu_out(N * qd), clse(s.batch * H * T), cdq(N * qd), cdk(N * kd),
        cdv(N * kd);
    boostlm::attention_forward(s, q.data(), qd, k.data(), kd, v.data(), kd, cpu_out.data(), qd,
                               clse.data());
    boostlm::attention_backward(s, q.data(), qd, k.data(), kd, v.data(), kd, cpu_out.data(), qd,
                                clse.data(), dout.data(), qd, cdq.data(), qd, cdk.data(), kd,
                                cdv.data(), kd);
    auto near = [](const std::vector<float>& a, const std::vector<float>& e, const char* what) {
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_NEAR(a[i], e[i], 1e-4 + 1e-4 * std::fabs(e[i])) << what << " at " << i;
    };
    near(out, cpu_out, "out");
    near(lse, clse, "lse");
    near(dq, cdq, "dq");
    near(dk, cdk, "dk");
    near(dv, cdv, "dv");
  }
}

}  // namespace
}  // namespace boostlm::cuda
