// The CUDA flash attention (forward, and backward's dQ, dK, dV) against the CPU backend's fused
// attention and against the plain reference kernel on the GPU, on ragged lengths (not multiples of
// the 32-row tiles), every compiled head-dimension size (odd ones included), GQA and MQA, and
// padded row strides; bf16 as the CPU's; and determinism. They skip, with the reason, where no GPU
// is visible.
//
// Tolerances. fp32: the CPU's tiles run on dnnl_sgemm and a polynomial exp (3 ulp), the GPU's on
// FMA loops and expf, and both sum in other orders; over ≤ 300 keys (times the group for dK/dV)
// the outputs and gradients agree to 2e-5 relative in norm (~100 fp32 ulps), each element to
// 1e-4 absolute plus 1e-3 relative, the lse to 1e-5 absolute. bf16 rounds q, k, v, dO, P and dS
// at the tile products (fp32 accumulation): the CPU's bf16 test's bounds (1% in norm, lse 0.02).
// Where the two GPU kernels read the same rounded values the comparison is exact.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/plans.h"

#ifdef BOOSTLM_CUDA_EMULATOR
#include "cuda_emulator/counters.h"
#endif

namespace boostlm {
namespace {

using cuda::testing::all_near;
using cuda::testing::all_within_bf16_ulps;
using cuda::testing::DeviceArray;
using cuda::testing::DeviceTest;
using cuda::testing::random_floats;
using cuda::testing::rounded;

using CudaAttention = DeviceTest;

// {batch, seq_len, n_heads, n_kv_heads, head_dim}
const AttentionShape kShapes[] = {
    {1, 1, 1, 1, 8},                          // one token
    {2, 33, 4, 2, 16},                        // GQA, one row past a tile
    {1, 100, 2, 1, 40},                       // MQA, 2 head chunks with a masked tail
    {2, 64, 8, 8, 64},                        // whole tiles
    {1, 7, 6, 3, 100},                        // 4 chunks, the last masked
    {1, 130, 4, 1, 128}, {1, 70, 2, 2, 256},  // the largest shared memory
    {2, 65, 4, 4, 32},                        // tensor cores: one row past their 64-row tile
};

using cuda::testing::relative_error;

std::vector<float> widened(const std::vector<bf16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_float(v[i]);
  return out;
}

// Inputs in row-strided buffers (q: ldq = n_heads·hd + 3; k, v: ldk = n_kv_heads·hd + 5).
struct Inputs {
  int64_t N, qd, kd, ldq, ldk, lse_size;
  std::vector<float> q, k, v, dout;
  explicit Inputs(const AttentionShape& s)
      : N(s.batch * s.seq_len),
        qd(s.n_heads * s.head_dim),
        kd(s.n_kv_heads * s.head_dim),
        ldq(qd + 3),
        ldk(kd + 5),
        lse_size(s.batch * s.n_heads * s.seq_len),
        q(random_floats(N * ldq, 1)),
        k(random_floats(N * ldk, 2)),
        v(random_floats(N * ldk, 3)),
        dout(random_floats(N * qd, 4)) {}
};

struct Result {
  std::vector<float> out, lse, dq, dk, dv;
};

Result cpu_attention(const AttentionShape& s, const Inputs& in) {
  Result r{std::vector<float>(in.N * in.qd), std::vector<float>(in.lse_size),
           std::vector<float>(in.N * in.qd), std::vector<float>(in.N * in.kd),
           std::vector<float>(in.N * in.kd)};
  attention_forward(s, in.q.data(), in.ldq, in.k.data(), in.ldk, in.v.data(), in.ldk, r.out.data(),
                    in.qd, r.lse.data());
  attention_backward(s, in.q.data(), in.ldq, in.k.data(), in.ldk, in.v.data(), in.ldk, r.out.data(),
                     in.qd, r.lse.data(), in.dout.data(), in.qd, r.dq.data(), in.qd, r.dk.data(),
                     in.kd, r.dv.data(), in.kd);
  return r;
}

// The GPU's flash kernels (or the reference ones) on fp32 inputs; gradients written over a
// non-zero fill, so a gradient element the kernels miss shows.
Result gpu_attention(const AttentionShape& s, const Inputs& in, bool reference,
                     cudaStream_t stream) {
  DeviceArray<float> q(in.q), k(in.k), v(in.v), dout(in.dout), out(in.N * in.qd), lse(in.lse_size),
      dq(std::vector<float>(in.N * in.qd, 9.0f)), dk(std::vector<float>(in.N * in.kd, 9.0f)),
      dv(std::vector<float>(in.N * in.kd, 9.0f));
  if (reference) {
    cuda::attention_reference_forward(s, q.get(), in.ldq, k.get(), in.ldk, v.get(), in.ldk,
                                      out.get(), in.qd, lse.get(), stream);
    cuda::attention_reference_backward(s, q.get(), in.ldq, k.get(), in.ldk, v.get(), in.ldk,
                                       out.get(), in.qd, lse.get(), dout.get(), in.qd, dq.get(),
                                       in.qd, dk.get(), in.kd, dv.get(), in.kd, stream);
  } else {
    const size_t bytes = cuda::attention_backward_workspace_bytes(s);
    DeviceArray<char> work(bytes);
    cuda::attention_forward(s, q.get(), in.ldq, k.get(), in.ldk, v.get(), in.ldk, out.get(), in.qd,
                            lse.get(), stream);
    cuda::attention_backward(s, q.get(), in.ldq, k.get(), in.ldk, v.get(), in.ldk, out.get(), in.qd,
                             lse.get(), dout.get(), in.qd, dq.get(), in.qd, dk.get(), in.kd,
                             dv.get(), in.kd, work.get(), bytes, stream);
  }
  BOOSTLM_CHECK_CUDA(cudaStreamSynchronize(stream));
  return {out.download(), lse.download(), dq.download(), dk.download(), dv.download()};
}

// At seq_len 1, dq and dk are exactly zero: one key, so P = 1 and dS = P·(dP − delta) with
// delta = dO·o = dO·v = dP. Both sides compute only rounding residue there (about 1e-7 of the
// gradients' scale in fp32), and a relative error against a zero norm measures nothing (it read
// 1 in fp32 and 2.4e4 in bf16 on the emulated device). At that shape fp32 keeps its element-wise
// bounds; bf16 is held to an absolute bound instead: the kernel's dP is dO·v on bf16-rounded
// tiles and delta is dO·o on the fp32 output, so dP − delta is hd·|dO|·|v|·2^-8 ≈ 8/256 at most
// for unit inputs (measured 3.4e-3), where a wrong gradient is of order 1.
bool zero_query_key_gradients(const AttentionShape& s) {
  return s.seq_len == 1;
}

void expect_fp32_close(const Result& a, const Result& b, const AttentionShape& s) {
  EXPECT_TRUE(all_near(a.lse, b.lse, 1e-5, 0));
  EXPECT_TRUE(all_near(a.out, b.out, 1e-4, 1e-3));
  EXPECT_TRUE(all_near(a.dq, b.dq, 1e-4, 1e-3));
  EXPECT_TRUE(all_near(a.dk, b.dk, 1e-4, 1e-3));
  EXPECT_TRUE(all_near(a.dv, b.dv, 1e-4, 1e-3));
  EXPECT_LT(relative_error(a.out, b.out), 2e-5);
  if (!zero_query_key_gradients(s)) {
    EXPECT_LT(relative_error(a.dq, b.dq), 2e-5);
    EXPECT_LT(relative_error(a.dk, b.dk), 2e-5);
  }
  EXPECT_LT(relative_error(a.dv, b.dv), 2e-5);
}

void expect_bf16_close(const Result& a, const Result& b, const AttentionShape& s) {
  EXPECT_TRUE(all_near(a.lse, b.lse, 2e-2, 0));
  EXPECT_LT(relative_error(a.out, b.out), 1e-2);
  if (zero_query_key_gradients(s)) {
    EXPECT_TRUE(all_near(a.dq, b.dq, 3e-2, 0));
    EXPECT_TRUE(all_near(a.dk, b.dk, 3e-2, 0));
  } else {
    EXPECT_LT(relative_error(a.dq, b.dq), 1e-2);
    EXPECT_LT(relative_error(a.dk, b.dk), 1e-2);
  }
  EXPECT_LT(relative_error(a.dv, b.dv), 1e-2);
}

TEST_F(CudaAttention, Fp32MatchesTheCpuBackendAndTheReferenceKernel) {
  for (AttentionShape s : kShapes) {
    SCOPED_TRACE(::testing::Message() << s.batch << "x" << s.seq_len << " heads " << s.n_heads
                                      << "/" << s.n_kv_heads << " hd " << s.head_dim);
    const Inputs in(s);
    const Result flash = gpu_attention(s, in, false, stream);
    {
      SCOPED_TRACE("vs CPU");
      expect_fp32_close(flash, cpu_attention(s, in), s);
    }
    {
      SCOPED_TRACE("vs reference kernel");
      expect_fp32_close(flash, gpu_attention(s, in, true, stream), s);
    }
  }
}

// fp32 inputs with bf16 tile products, against the CPU's bf16 request (its bf16 tiles where the CPU
// has AVX512-BF16, else its fp32 kernel: within the same bound) and the reference kernel's
// rounding.
TEST_F(CudaAttention, Bf16ComputeMatchesTheCpuBackendWithinBf16Rounding) {
  for (AttentionShape s : kShapes) {
    s.compute = DType::bf16;
    SCOPED_TRACE(::testing::Message() << s.seq_len << " hd " << s.head_dim);
    const Inputs in(s);
    const Result flash = gpu_attention(s, in, false, stream);
    expect_bf16_close(flash, cpu_attention(s, in), s);
    expect_bf16_close(flash, gpu_attention(s, in, true, stream), s);
  }
}

// bf16 storage (q, k, v, out in bf16) is the fp32-input kernel with bf16 compute on the same
// rounded values, bit for bit: the output rounded once, the same lse, and the backward's gradients
// from the kept output equal to those from its widened values. Against the CPU's bf16 storage
// within bf16 bounds.
TEST_F(CudaAttention, Bf16StorageIsTheKernelOnTheRoundedValues) {
  for (AttentionShape s : kShapes) {
    s.compute = DType::bf16;
    SCOPED_TRACE(::testing::Message() << s.seq_len << " hd " << s.head_dim);
    Inputs in(s);
    const auto q16 = rounded(in.q), k16 = rounded(in.k), v16 = rounded(in.v);
    in.q = widened(q16);
    in.k = widened(k16);
    in.v = widened(v16);
    const Result as_fp32 = gpu_attention(s, in, false, stream);

    DeviceArray<bf16_t> q(q16), k(k16), v(v16), out(in.N * in.qd);
    DeviceArray<float> lse(in.lse_size), dout(in.dout), dq(in.N * in.qd), dk(in.N * in.kd),
        dv(in.N * in.kd);
    const size_t bytes = cuda::attention_backward_workspace_bytes(s, true);
    DeviceArray<char> work(bytes);
    cuda::attention_forward(s, q.get(), in.ldq, k.get(), in.ldk, v.get(), in.ldk, out.get(), in.qd,
                            lse.get(), stream);
    cuda::attention_backward(s, q.get(), in.ldq, k.get(), in.ldk, v.get(), in.ldk, out.get(), in.qd,
                             lse.get(), dout.get(), in.qd, dq.get(), in.qd, dk.get(), in.kd,
                             dv.get(), in.kd, work.get(), bytes, stream);
    sync();
    const std::vector<bf16_t> out16 = out.download();
    EXPECT_TRUE(all_within_bf16_ulps(out16, rounded(as_fp32.out), 0));
    EXPECT_TRUE(all_near(lse.download(), as_fp32.lse, 0, 0));

    // The fp32-input backward from the kept (rounded) output: the same delta, the same gradients.
    DeviceArray<float> q32(in.q), k32(in.k), v32(in.v), kept(widened(out16)), lse32(lse.download()),
        dq32(in.N * in.qd), dk32(in.N * in.kd), dv32(in.N * in.kd);
    cuda::attention_backward(s, q32.get(), in.ldq, k32.get(), in.ldk, v32.get(), in.ldk, kept.get(),
                             in.qd, lse32.get(), dout.get(), in.qd, dq32.get(), in.qd, dk32.get(),
                             in.kd, dv32.get(), in.kd, work.get(), bytes, stream);
    sync();
    EXPECT_TRUE(all_near(dq.download(), dq32.download(), 0, 0));
    EXPECT_TRUE(all_near(dk.download(), dk32.download(), 0, 0));
    EXPECT_TRUE(all_near(dv.download(), dv32.download(), 0, 0));

    // Against the CPU backend's bf16 storage.
    std::vector<bf16_t> cpu_out16(in.N * in.qd);
    std::vector<float> cpu_lse(in.lse_size), cdq(in.N * in.qd), cdk(in.N * in.kd),
        cdv(in.N * in.kd);
    attention_forward(s, q16.data(), in.ldq, k16.data(), in.ldk, v16.data(), in.ldk,
                      cpu_out16.data(), in.qd, cpu_lse.data());
    attention_backward(s, q16.data(), in.ldq, k16.data(), in.ldk, v16.data(), in.ldk,
                       cpu_out16.data(), in.qd, cpu_lse.data(), in.dout.data(), in.qd, cdq.data(),
                       in.qd, cdk.data(), in.kd, cdv.data(), in.kd);
    expect_bf16_close({widened(out16), lse.download(), dq.download(), dk.download(), dv.download()},
                      {widened(cpu_out16), cpu_lse, cdq, cdk, cdv}, s);
  }
}

// No atomics anywhere: the same inputs give the same bits, run after run (fp32 and bf16).
TEST_F(CudaAttention, IsDeterministic) {
  for (DType compute : {DType::f32, DType::bf16}) {
    AttentionShape s{2, 200, 8, 2, 64};
    s.compute = compute;
    const Inputs in(s);
    const Result a = gpu_attention(s, in, false, stream), b = gpu_attention(s, in, false, stream);
    EXPECT_TRUE(all_near(a.out, b.out, 0, 0));
    EXPECT_TRUE(all_near(a.lse, b.lse, 0, 0));
    EXPECT_TRUE(all_near(a.dq, b.dq, 0, 0));
    EXPECT_TRUE(all_near(a.dk, b.dk, 0, 0));
    EXPECT_TRUE(all_near(a.dv, b.dv, 0, 0));
  }
}

// bf16 at head dimensions 16, 32, 64 and 128 runs on the tensor-core kernels (attention_mma.cu);
// against the CUDA-core kernels on the same inputs: both round q, k, v, dO, P and dS to bf16 and
// accumulate in fp32, in other orders (and P rounded from probabilities that differ in the last
// fp32 bits), so they agree far inside the bf16 bounds: 2e-3 relative in norm.
TEST_F(CudaAttention, TensorCoresMatchTheCudaCoreKernels) {
  const AttentionShape shapes[] = {
      {2, 33, 4, 2, 16}, {2, 65, 4, 4, 32}, {1, 200, 4, 1, 64}, {1, 130, 2, 2, 128}};
  for (AttentionShape s : shapes) {
    s.compute = DType::bf16;
    SCOPED_TRACE(::testing::Message() << s.seq_len << " hd " << s.head_dim);
    ASSERT_TRUE(cuda::attention_uses_tensor_cores(s, false));
    const Inputs in(s);
    const Result tensor = gpu_attention(s, in, false, stream);
    cuda::set_attention_tensor_cores(false);
    const Result scalar = gpu_attention(s, in, false, stream);
    cuda::set_attention_tensor_cores(true);
    EXPECT_TRUE(all_near(tensor.lse, scalar.lse, 1e-5, 1e-5));
    EXPECT_LT(relative_error(tensor.out, scalar.out), 2e-3);
    EXPECT_LT(relative_error(tensor.dq, scalar.dq), 2e-3);
    EXPECT_LT(relative_error(tensor.dk, scalar.dk), 2e-3);
    EXPECT_LT(relative_error(tensor.dv, scalar.dv), 2e-3);
  }
}

// dQ from the dK/dV kernel's stored dS tiles is dQ recomputing S and dP bit for bit (the same dS,
// rounded to the same bf16, summed over the key tiles in the same order; dK and dV unchanged), in
// one chunk of units, in several (the last one shorter or balanced), one unit a chunk, and for
// bf16 inputs as for fp32 inputs with bf16 compute.
TEST_F(CudaAttention, DqFromStoredDsIsTheRecomputedDqBitForBit) {
  AttentionShape s{3, 130, 4, 2, 64};  // 6 units of (batch, kv head), 3 query tiles
  s.compute = DType::bf16;
  const Inputs in(s);
  const size_t unit = attention_ds_unit_bytes(s);
  EXPECT_EQ(unit, 6u * 2 * 64 * 64 * 2);  // 3 · 4 / 2 tile pairs, 2 query heads a unit
  cuda::set_attention_ds_scratch_bytes(unit - 1);
  ASSERT_EQ(cuda::attention_ds_chunk_units(s), 0);
  EXPECT_EQ(cuda::attention_backward_workspace_bytes(s), 3u * 130 * 4 * 4);  // delta only
  const Result recomputed = gpu_attention(s, in, false, stream);
  for (const auto& [bound, units] : {std::pair{6, 6}, {4, 3}, {5, 3}, {1, 1}}) {
    SCOPED_TRACE(::testing::Message() << "a bound of " << bound << " units");
    cuda::set_attention_ds_scratch_bytes(bound * unit);
    ASSERT_EQ(cuda::attention_ds_chunk_units(s), units);
    const Result stored = gpu_attention(s, in, false, stream);
    EXPECT_TRUE(all_near(stored.dq, recomputed.dq, 0, 0));
    EXPECT_TRUE(all_near(stored.dk, recomputed.dk, 0, 0));
    EXPECT_TRUE(all_near(stored.dv, recomputed.dv, 0, 0));
    EXPECT_TRUE(all_near(stored.out, recomputed.out, 0, 0));
  }
  cuda::set_attention_ds_scratch_bytes(0);
  EXPECT_EQ(cuda::attention_ds_chunk_units(s), 6);
  EXPECT_EQ(cuda::attention_backward_workspace_bytes(s), 6400u + 6 * unit);  // delta to 256 B
  EXPECT_EQ(cuda::attention_backward_workspace_bytes(s),
            cuda::attention_backward_workspace_bytes({3, 130, 4, 2, 64}, true));
}

#ifdef BOOSTLM_CUDA_EMULATOR
// On the emulated device every FLOP of the tensor-core kernels' tile products is an mma.sync (the
// counters see each one), exactly as many as the kernel's own estimate (plans.h), which the
// roofline and scripts/device-check.sh take for the work done; the CUDA-core kernels count none.
TEST_F(CudaAttention, TensorCoreKernelsRunTheirEstimatedFlopsAsMma) {
  AttentionShape s{2, 130, 4, 2, 64};
  s.compute = DType::bf16;
  const Inputs in(s);
  cuda_emulator::reset_kernel_counters();
  gpu_attention(s, in, false, stream);
  struct Counted {
    uint64_t forward = 0, dkdv = 0, dq = 0, dq_ds = 0, other = 0, dkdv_written = 0;
    int64_t dkdv_launches = 0, dq_ds_launches = 0;
  };
  const auto count = [] {
    Counted n;
    for (const auto& c : cuda_emulator::kernel_counters()) {
      if (c.kernel.find("mma_forward_kernel") != std::string::npos) {
        n.forward += c.tensor_flops;
      } else if (c.kernel.find("mma_backward_dkdv_kernel") != std::string::npos) {
        n.dkdv += c.tensor_flops;
        n.dkdv_written += c.bytes_written;
        n.dkdv_launches += c.launches;
      } else if (c.kernel.find("mma_backward_dq_kernel") != std::string::npos) {
        n.dq += c.tensor_flops;
      } else if (c.kernel.find("mma_backward_dq_ds_kernel") != std::string::npos) {
        n.dq_ds += c.tensor_flops;
        n.dq_ds_launches += c.launches;
      } else {
        n.other += c.tensor_flops;
      }
    }
    return n;
  };
  // dQ from the stored dS: one product a tile, 5 in the backward (s has 4 units, one chunk).
  const Counted stored = count();
  EXPECT_EQ(stored.forward, cuda::attention_mma_flops(s, cuda::AttentionKernel::forward));
  EXPECT_EQ(stored.dkdv, cuda::attention_mma_flops(s, cuda::AttentionKernel::backward_dkdv));
  EXPECT_EQ(stored.dq_ds, cuda::attention_mma_flops(s, cuda::AttentionKernel::backward_dq_ds));
  EXPECT_EQ(stored.dq, 0u);
  EXPECT_EQ(stored.other, 0u);
  EXPECT_EQ(stored.dq_ds * 2, stored.forward);  // one product of the forward's two
  EXPECT_EQ(stored.dkdv_written,
            2 * in.N * in.kd * sizeof(float) + 4 * attention_ds_unit_bytes(s));  // dK, dV and dS
  // Several chunks: their launches' counts add up to one's.
  cuda::set_attention_ds_scratch_bytes(2 * attention_ds_unit_bytes(s));
  cuda_emulator::reset_kernel_counters();
  gpu_attention(s, in, false, stream);
  const Counted chunked = count();
  EXPECT_EQ(chunked.dkdv_launches, 2);
  EXPECT_EQ(chunked.dq_ds_launches, 2);
  EXPECT_EQ(chunked.dkdv, stored.dkdv);
  EXPECT_EQ(chunked.dq_ds, stored.dq_ds);
  EXPECT_EQ(chunked.dkdv_written, stored.dkdv_written);
  // A unit over the bound: dQ recomputes S and dP (3 products a tile, 7 in the backward).
  cuda::set_attention_ds_scratch_bytes(1);
  cuda_emulator::reset_kernel_counters();
  gpu_attention(s, in, false, stream);
  const Counted recomputed = count();
  cuda::set_attention_ds_scratch_bytes(0);
  EXPECT_EQ(recomputed.dq, cuda::attention_mma_flops(s, cuda::AttentionKernel::backward_dq));
  EXPECT_EQ(recomputed.dq, 3 * stored.dq_ds);
  EXPECT_EQ(recomputed.dq_ds, 0u);

  cuda_emulator::reset_kernel_counters();
  s.compute = DType::f32;
  gpu_attention(s, in, false, stream);
  for (const auto& c : cuda_emulator::kernel_counters()) EXPECT_EQ(c.tensor_flops, 0u) << c.kernel;
}
#endif

// The cached attention of generation (one block per new token and head, every key's score in
// shared memory) past the 48 KiB a block has without cudaFuncSetAttribute: 12 288 keys of fp32
// scores, less the kernel's static shared memory (issue 38's F4: the kernel neither counted its
// static part nor opted in, so generation failed near 12 k cached positions; the emulated device
// refuses a launch over the limit as a GPU does). Against the CPU backend's kernel: 12 288 keys,
// whose scores alone fill 48 KiB (before the fix the launch, with its static part, was over the
// limit), past it, and at the kernel's own maximum, which a position more is refused at. Seen
// failing on the code before a513c98: the maximum read 12 288 and 12 790 keys were refused.
TEST_F(CudaAttention, CachedAttentionHoldsMoreKeysThanTheDefaultSharedMemory) {
  const int64_t default_keys = (48 << 10) / static_cast<int64_t>(sizeof(float));
  const int64_t max_keys = cuda::attention_cached_max_keys();
  int device = 0, optin = 0;
  BOOSTLM_CHECK_CUDA(cudaGetDevice(&device));
  BOOSTLM_CHECK_CUDA(
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  ASSERT_GT(optin, 48 << 10) << "a device without opt-in shared memory (before sm_70)";
  EXPECT_GT(max_keys, default_keys);
  EXPECT_LE(max_keys * static_cast<int64_t>(sizeof(float)), optin);

  const int64_t n_heads = 2, n_kv_heads = 1, head_dim = 8;
  // {new tokens, cached positions before them}
  const std::pair<int64_t, int64_t> cases[] = {
      {1, default_keys - 1}, {2, default_keys + 500}, {1, max_keys - 1}};
  for (const auto& [n, first_pos] : cases) {
    SCOPED_TRACE("keys " + std::to_string(first_pos + n));
    const int64_t keys = first_pos + n, ldq = n_heads * head_dim, ldkv = n_kv_heads * head_dim;
    const std::vector<float> q = random_floats(n * ldq, 11), k = random_floats(keys * ldkv, 12),
                             v = random_floats(keys * ldkv, 13);
    std::vector<float> want(n * ldq);
    attention_cached_forward(n, first_pos, n_heads, n_kv_heads, head_dim, q.data(), k.data(),
                             v.data(), want.data());
    DeviceArray<float> dq(q), dk(k), dv(v), out(std::vector<float>(n * ldq, 9.0f));
    cuda::attention_cached_forward(n, first_pos, n_heads, n_kv_heads, head_dim, dq.get(), dk.get(),
                                   dv.get(), out.get(), stream);
    sync();
    // The weights are summed over ~10^4 keys in other orders on the two sides.
    EXPECT_TRUE(all_near(out.download(), want, 1e-5, 1e-4));
  }

  DeviceArray<float> q(std::vector<float>(n_heads * head_dim)),
      kv(std::vector<float>((max_keys + 1) * n_kv_heads * head_dim)),
      out(std::vector<float>(n_heads * head_dim));
  try {
    cuda::attention_cached_forward(1, max_keys, n_heads, n_kv_heads, head_dim, q.get(), kv.get(),
                                   kv.get(), out.get(), stream);
    ADD_FAILURE() << max_keys + 1 << " keys were taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cached positions exceed"), std::string::npos) << e.what();
  }
}

#ifndef BOOSTLM_CUDA_EMULATOR
// On a GPU (scripts/device-check.sh prints these lines): the tensor-core kernels' rate at the 1B
// presets' attention (bf16, causal, seq 4096) against the CUDA-core kernels at the same shape, as
// TFLOP/s of the model's FLOPs (causal: the masked half not counted) and of the kernels' own
// estimate of what they execute (plans.h, masked tiles included). Too slow for the emulator.
TEST_F(CudaAttention, MeasuresTheAttentionRate) {
  for (int64_t head_dim : {64, 128}) {
    AttentionShape s{2, 4096, 2048 / head_dim, 2048 / head_dim, head_dim};
    s.compute = DType::bf16;
    const int64_t N = s.batch * s.seq_len, width = s.n_heads * s.head_dim;
    const std::vector<float> values = random_floats(N * width, 5);
    std::vector<bf16_t> rounded(values.size());
    for (size_t i = 0; i < values.size(); ++i) rounded[i] = float_to_bf16(values[i]);
    DeviceArray<bf16_t> q(rounded), k(rounded), v(rounded), out(N * width);
    DeviceArray<float> lse(s.batch * s.n_heads * s.seq_len), dout(values), dq(N * width),
        dk(N * width), dv(N * width);
    const size_t bytes = cuda::attention_backward_workspace_bytes(s, true);
    DeviceArray<char> work(bytes);
    // The model's FLOPs: QKᵀ and PV over the causal pairs; the backward counted as 2.5x the
    // forward (FlashAttention's convention: four products and the recomputed S).
    const double pairs = static_cast<double>(s.seq_len) * (s.seq_len + 1) / 2;
    const double forward_model = 4.0 * s.batch * s.n_heads * s.head_dim * pairs;
    for (bool tensor_cores : {true, false}) {
      cuda::set_attention_tensor_cores(tensor_cores);
      auto time_ms = [&](auto&& run) {
        run();  // warm-up
        cudaEvent_t start, stop;
        BOOSTLM_CHECK_CUDA(cudaEventCreate(&start));
        BOOSTLM_CHECK_CUDA(cudaEventCreate(&stop));
        constexpr int kReps = 5;
        BOOSTLM_CHECK_CUDA(cudaEventRecord(start, stream));
        for (int i = 0; i < kReps; ++i) run();
        BOOSTLM_CHECK_CUDA(cudaEventRecord(stop, stream));
        BOOSTLM_CHECK_CUDA(cudaEventSynchronize(stop));
        float ms = 0;
        BOOSTLM_CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
        cudaEventDestroy(start);
        cudaEventDestroy(stop);
        return ms / kReps;
      };
      const float forward_ms = time_ms([&] {
        cuda::attention_forward(s, q.get(), width, k.get(), width, v.get(), width, out.get(), width,
                                lse.get(), stream);
      });
      const float backward_ms = time_ms([&] {
        cuda::attention_backward(s, q.get(), width, k.get(), width, v.get(), width, out.get(),
                                 width, lse.get(), dout.get(), width, dq.get(), width, dk.get(),
                                 width, dv.get(), width, work.get(), bytes, stream);
      });
      const double executed_forward =
          static_cast<double>(cuda::attention_mma_flops(s, cuda::AttentionKernel::forward));
      const double executed_backward =
          static_cast<double>(cuda::attention_mma_flops(s, cuda::AttentionKernel::backward_dkdv) +
                              cuda::attention_mma_flops(s, cuda::AttentionKernel::backward_dq));
      std::printf(
          "attention %s bf16 hd %ld seq %ld heads %ld batch %ld: forward %.3f ms, %.1f TFLOP/s "
          "(model), %.1f (executed); backward %.3f ms, %.1f TFLOP/s (model, 2.5x forward), "
          "%.1f (executed)\n",
          tensor_cores ? "tensor-core" : "cuda-core", s.head_dim, s.seq_len, s.n_heads, s.batch,
          forward_ms, forward_model / forward_ms / 1e9, executed_forward / forward_ms / 1e9,
          backward_ms, 2.5 * forward_model / backward_ms / 1e9,
          executed_backward / backward_ms / 1e9);
      EXPECT_GT(forward_ms, 0.0f);
      EXPECT_GT(backward_ms, 0.0f);
    }
    cuda::set_attention_tensor_cores(true);
  }
}
#endif

}  // namespace
}  // namespace boostlm
