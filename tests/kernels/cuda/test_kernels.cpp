// Each CUDA kernel against the CPU backend's function on the same inputs, on random shapes
// including ragged ones (odd widths, padded row strides, every row-kernel block size). They skip,
// with the reason, where no GPU is visible.
//
// Tolerances (stated per test): the CUDA kernels share the CPU's per-element formulas
// (kernels/math.h) but not bit for bit: the CPU's SiLU uses its own polynomial exp (3 ulp), the
// two compilers contract a·b + c into FMAs in different places, and row sums run in a different
// order. fp32 results are compared to a few ulps per operation (reductions: ~sqrt(D)·2^-24
// relative); bf16 results are checked bit-exactly against the rounding of the CUDA kernel's own
// fp32 result where the CPU tests check the same property, and to 1 bf16 ulp against the CPU's
// (two fp32 values a few ulps apart round apart only across a rounding boundary). Results whose
// arithmetic is the same in the same order (embedding, scale) are compared exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/activation.h"
#include "kernels/adamw.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/table.h"
#include "kernels/embedding.h"
#include "kernels/math.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#ifdef BOOSTLM_CUDA_EMULATOR
#include "cuda_emulator/counters.h"
#endif

// In namespace boostlm (not boostlm::cuda): an unqualified kernel is the CPU backend's, cuda::
// names the CUDA one.
namespace boostlm {
namespace {

using cuda::DeviceRopeTable;
using cuda::testing::all_near;
using cuda::testing::all_within_bf16_ulps;
using cuda::testing::DeviceArray;
using cuda::testing::DeviceTest;
using cuda::testing::random_floats;
using cuda::testing::rounded;

using CudaRmsNorm = DeviceTest;
using CudaActivation = DeviceTest;
using CudaAdamW = DeviceTest;
using CudaEmbedding = DeviceTest;
using CudaRope = DeviceTest;

using cuda::testing::kRowShapes;
using cuda::testing::RowShape;

TEST_F(CudaRmsNorm, ForwardMatchesTheCpuBackend) {
  const float eps = 1e-5f;
  for (const RowShape& s : kRowShapes) {
    SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.D << "+" << s.pad);
    const int64_t ld = s.D + s.pad;
    const auto x = random_floats(s.rows * ld, 1), gamma = random_floats(s.D, 2);
    std::vector<float> y(s.rows * ld, -7.0f), rstd(s.rows);
    rmsnorm_forward(x.data(), ld, gamma.data(), s.rows, s.D, eps, y.data(), ld, rstd.data());

    DeviceArray<float> dx(x), dgamma(gamma), dy(std::vector<float>(s.rows * ld, -7.0f)),
        drstd(s.rows);
    std::vector<bf16_t> y16_init(s.rows * ld, 0x1234);
    DeviceArray<bf16_t> dy16(y16_init);
    DeviceArray<float> drstd16(s.rows);
    cuda::rmsnorm_forward(dx.get(), ld, dgamma.get(), s.rows, s.D, eps, dy.get(), ld, drstd.get(),
                          stream);
    cuda::rmsnorm_forward_bf16(dx.get(), ld, dgamma.get(), s.rows, s.D, eps, dy16.get(), ld,
                               drstd16.get(), stream);
    sync();
    // Σx² over D ≤ 4099 terms in another order: ~sqrt(D)·2^-24 relative, 1e-5 is ~2x that.
    EXPECT_TRUE(all_near(drstd.download(), rstd, 0, 1e-5));
    EXPECT_TRUE(all_near(dy.download(), y, 1e-6, 1e-5));  // padding untouched (exact)
    // The bf16 form: the same rstd, and y rounded from the fp32 kernel's y, bit for bit (padding
    // untouched); to 1 ulp of the CPU's rounded y.
    EXPECT_TRUE(all_near(drstd16.download(), drstd.download(), 0, 0));
    std::vector<bf16_t> expected16 = rounded(dy.download()), cpu16 = rounded(y);
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t j = s.D; j < ld; ++j) expected16[r * ld + j] = cpu16[r * ld + j] = 0x1234;
    const std::vector<bf16_t> y16 = dy16.download();
    EXPECT_EQ(y16, expected16);
    EXPECT_TRUE(all_within_bf16_ulps(y16, cpu16));
  }
}

TEST_F(CudaRmsNorm, BackwardMatchesTheCpuBackendAndDgammaIsDeterministic) {
  const float eps = 1e-5f;
  for (const RowShape& s : kRowShapes) {
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << s.rows << "x" << s.D << "+" << s.pad << " accumulate " << accumulate);
      const int64_t ld = s.D + s.pad;
      const auto x = random_floats(s.rows * ld, 3), gamma = random_floats(s.D, 4);
      const auto grad_out = random_floats(s.rows * ld, 5);
      const auto dx0 = random_floats(s.rows * ld, 6), dgamma0 = random_floats(s.D, 7);
      std::vector<float> y(s.rows * ld), rstd(s.rows);
      rmsnorm_forward(x.data(), ld, gamma.data(), s.rows, s.D, eps, y.data(), ld, rstd.data());
      std::vector<float> dx = dx0, dgamma = dgamma0;
      rmsnorm_backward(grad_out.data(), ld, x.data(), ld, gamma.data(), rstd.data(), s.rows, s.D,
                       dx.data(), ld, dgamma.data(), accumulate);

      DeviceArray<float> d_x(x), d_gamma(gamma), d_dy(grad_out), d_rstd(rstd), d_dx(dx0),
          d_dgamma(dgamma0), d_dgamma_again(dgamma0), d_dx_again(dx0);
      const size_t bytes = cuda::rmsnorm_backward_workspace_bytes(s.rows, s.D);
      DeviceArray<unsigned char> workspace(bytes);
      for (auto [out_dx, out_dgamma] :
           {std::pair{&d_dx, &d_dgamma}, std::pair{&d_dx_again, &d_dgamma_again}})
        cuda::rmsnorm_backward(d_dy.get(), ld, d_x.get(), ld, d_gamma.get(), d_rstd.get(), s.rows,
                               s.D, out_dx->get(), ld, out_dgamma->get(), accumulate,
                               workspace.get(), bytes, stream);
      sync();
      // dx's dot product sums D terms (~sqrt(D)·2^-24 relative to |dy||γ||x|), scaled by rstd³/D.
      EXPECT_TRUE(all_near(d_dx.download(), dx, 1e-5, 1e-4));
      // dγ sums `rows` products of size ~1 in chunks rather than in row order: an absolute error
      // up to ~3·2^-24 per row.
      EXPECT_TRUE(all_near(d_dgamma.download(), dgamma, 2e-7 * s.rows, 1e-5));
      // Deterministic: a second run gives the same bits.
      EXPECT_TRUE(all_near(d_dgamma_again.download(), d_dgamma.download(), 0, 0));
      EXPECT_TRUE(all_near(d_dx_again.download(), d_dx.download(), 0, 0));
    }
  }
}

// Inputs spread over ±4σ·4 so that both tails of the sigmoid are exercised.
TEST_F(CudaActivation, SiluMatchesTheCpuBackendOnStridedRows) {
  struct Shape {
    int64_t rows, cols, pad_x, pad_y;
  };
  for (const Shape& s : {Shape{5, 37, 3, 4}, Shape{64, 1000, 0, 0}, Shape{1, 1, 0, 0}}) {
    SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.cols);
    const int64_t ldx = s.cols + s.pad_x, ldy = s.cols + s.pad_y;
    const auto x = random_floats(s.rows * ldx, 8, 4.0f), dy = random_floats(s.rows * ldy, 9);
    std::vector<float> y(s.rows * ldy, -3.0f), dx(s.rows * ldy, -3.0f);
    silu_forward(x.data(), ldx, s.rows, s.cols, y.data(), ldy);
    silu_backward(dy.data(), ldy, x.data(), ldx, s.rows, s.cols, dx.data(), ldy);

    DeviceArray<float> d_x(x), d_dy(dy), d_y(std::vector<float>(s.rows * ldy, -3.0f)),
        d_dx(std::vector<float>(s.rows * ldy, -3.0f));
    cuda::silu_forward(d_x.get(), ldx, s.rows, s.cols, d_y.get(), ldy, stream);
    cuda::silu_backward(d_dy.get(), ldy, d_x.get(), ldx, s.rows, s.cols, d_dx.get(), ldy, stream);
    sync();
    // expf vs the CPU's 3-ulp polynomial exp; silu' crosses zero near x = −1.28 (absolute).
    EXPECT_TRUE(all_near(d_y.download(), y, 1e-6, 1e-5));
    EXPECT_TRUE(all_near(d_dx.download(), dx, 1e-6, 1e-5));
  }
}

TEST_F(CudaActivation, SiluBf16FormsMatchTheCpuBackend) {
  const int64_t rows = 7, cols = 301, n = rows * cols;
  const auto x = random_floats(n, 10, 4.0f), dy = random_floats(n, 11);
  const std::vector<bf16_t> x16 = rounded(x);
  std::vector<bf16_t> y_from32(n), y_from16(n);
  std::vector<float> dx(n);
  silu_forward_bf16(x.data(), rows, cols, y_from32.data());
  silu_forward_bf16(x16.data(), rows, cols, y_from16.data());
  silu_backward(dy.data(), x16.data(), rows, cols, dx.data());

  DeviceArray<float> d_x(x), d_dy(dy), d_dx(n), d_y32(n);
  DeviceArray<bf16_t> d_x16(x16), d_y_from32(n), d_y_from16(n);
  cuda::silu_forward_bf16(d_x.get(), rows, cols, d_y_from32.get(), stream);
  cuda::silu_forward_bf16(d_x16.get(), rows, cols, d_y_from16.get(), stream);
  cuda::silu_backward(d_dy.get(), d_x16.get(), rows, cols, d_dx.get(), stream);
  cuda::silu_forward(d_x.get(), cols, rows, cols, d_y32.get(), cols, stream);
  sync();
  EXPECT_EQ(d_y_from32.download(), rounded(d_y32.download()));  // the fp32 kernel, rounded
  EXPECT_TRUE(all_within_bf16_ulps(d_y_from32.download(), y_from32));
  EXPECT_TRUE(all_within_bf16_ulps(d_y_from16.download(), y_from16));
  EXPECT_TRUE(all_near(d_dx.download(), dx, 1e-6, 1e-5));
  // The gradient written in bf16 only: the device's fp32 gradient rounded, from either x.
  DeviceArray<float> d_dx32(n);
  DeviceArray<bf16_t> d_out16(n), d_out16_from16(n);
  cuda::silu_backward(d_dy.get(), cols, d_x.get(), cols, rows, cols, d_dx32.get(), cols, stream);
  cuda::silu_backward_to_bf16(d_dy.get(), d_x.get(), rows, cols, d_out16.get(), stream);
  cuda::silu_backward_to_bf16(d_dy.get(), d_x16.get(), rows, cols, d_out16_from16.get(), stream);
  sync();
  EXPECT_EQ(d_out16.download(), rounded(d_dx32.download()));
  EXPECT_EQ(d_out16_from16.download(), rounded(d_dx.download()));
}

TEST_F(CudaActivation, SwiGluMatchesTheCpuBackendWithAndWithoutGateActivation) {
  const int64_t n = 4099;
  const auto g = random_floats(n, 12, 4.0f), u = random_floats(n, 13), dh = random_floats(n, 14);
  for (bool gate_act : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "gate_act " << gate_act);
    std::vector<float> h(n), dg(n), du(n);
    swiglu_forward(g.data(), u.data(), n, gate_act, h.data());
    swiglu_backward(dh.data(), g.data(), u.data(), n, gate_act, dg.data(), du.data());

    DeviceArray<float> d_g(g), d_u(u), d_dh(dh), d_h(n), d_dg(n), d_du(n);
    cuda::swiglu_forward(d_g.get(), d_u.get(), n, gate_act, d_h.get(), stream);
    cuda::swiglu_backward(d_dh.get(), d_g.get(), d_u.get(), n, gate_act, d_dg.get(), d_du.get(),
                          stream);
    sync();
    EXPECT_TRUE(all_near(d_h.download(), h, 1e-6, 1e-5));
    EXPECT_TRUE(all_near(d_dg.download(), dg, 1e-6, 1e-5));
    EXPECT_TRUE(all_near(d_du.download(), du, 1e-6, 1e-5));
  }
}

// As the CPU tests state it: forward keeps g and u rounded and h from the rounded values, so that
// the recomputation from the kept values gives the same h (bit for bit, on one backend); against
// the CPU, the kept values are exact and h and the gradients within 1 bf16 ulp.
TEST_F(CudaActivation, SwiGluBf16FormsMatchTheCpuBackend) {
  const int64_t n = 1001;
  const auto g = random_floats(n, 15, 4.0f), u = random_floats(n, 16), dh = random_floats(n, 17);
  for (bool gate_act : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "gate_act " << gate_act);
    std::vector<bf16_t> g_kept(n), u_kept(n), h(n), dg(n), du(n);
    swiglu_forward_bf16(g.data(), u.data(), n, gate_act, g_kept.data(), u_kept.data(), h.data());
    swiglu_backward_bf16(dh.data(), g_kept.data(), u_kept.data(), n, gate_act, dg.data(),
                         du.data());

    DeviceArray<float> d_g(g), d_u(u), d_dh(dh);
    DeviceArray<bf16_t> d_g_kept(n), d_u_kept(n), d_h(n), d_h_again(n), d_dg(n), d_du(n);
    cuda::swiglu_forward_bf16(d_g.get(), d_u.get(), n, gate_act, d_g_kept.get(), d_u_kept.get(),
                              d_h.get(), stream);
    cuda::swiglu_forward_bf16(d_g_kept.get(), d_u_kept.get(), n, gate_act, d_h_again.get(), stream);
    cuda::swiglu_backward_bf16(d_dh.get(), d_g_kept.get(), d_u_kept.get(), n, gate_act, d_dg.get(),
                               d_du.get(), stream);
    sync();
    EXPECT_EQ(d_g_kept.download(), g_kept);
    EXPECT_EQ(d_u_kept.download(), u_kept);
    EXPECT_EQ(d_h_again.download(), d_h.download());
    EXPECT_TRUE(all_within_bf16_ulps(d_h.download(), h));
    EXPECT_TRUE(all_within_bf16_ulps(d_dg.download(), dg));
    EXPECT_TRUE(all_within_bf16_ulps(d_du.download(), du));

    // dh in bf16: within 1 ulp of the CPU's form from the same bf16 dh.
    std::vector<bf16_t> dh16(n), dg16(n), du16(n);
    for (int64_t i = 0; i < n; ++i) dh16[i] = float_to_bf16(dh[i]);
    swiglu_backward_bf16(dh16.data(), g_kept.data(), u_kept.data(), n, gate_act, dg16.data(),
                         du16.data());
    DeviceArray<bf16_t> d_dh16(dh16), d_dg16(n), d_du16(n);
    cuda::swiglu_backward_bf16(d_dh16.get(), d_g_kept.get(), d_u_kept.get(), n, gate_act,
                               d_dg16.get(), d_du16.get(), stream);
    sync();
    EXPECT_TRUE(all_within_bf16_ulps(d_dg16.download(), dg16));
    EXPECT_TRUE(all_within_bf16_ulps(d_du16.download(), du16));
  }
}

// Three steps with clipping and weight decay; the bf16 copy written in the pass is the rounding of
// the updated weights (bit for bit) and within 1 ulp of the CPU's copy.
TEST_F(CudaAdamW, UpdateMatchesTheCpuBackendWithClippingAndTheBf16Copy) {
  const int64_t n = 10007;
  std::vector<float> p = random_floats(n, 18), m = random_floats(n, 19, 0.1f), v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = 0.01f * std::abs(random_floats(1, 100 + i)[0]);
  DeviceArray<float> d_p(p), d_m(m), d_v(v);
  DeviceArray<bf16_t> d_p16(n);
  std::vector<bf16_t> p16(n);
  AdamWHyper h;
  h.lr = 1e-2f;
  h.weight_decay = 0.1f;
  h.grad_scale = 0.5f;
  for (int64_t step = 1; step <= 3; ++step) {
    h.step = step;
    const auto g = random_floats(n, 20 + step);
    DeviceArray<float> d_g(g);
    adamw_update(p.data(), g.data(), m.data(), v.data(), n, h, p16.data());
    cuda::adamw_update(d_p.get(), d_g.get(), d_m.get(), d_v.get(), n, h, d_p16.get(), stream);
    sync();
  }
  // One update's few roundings, the FMAs placed differently by the two compilers: a few ulps.
  // (A missing grad_scale or bias correction moves p by ~1e-3.)
  EXPECT_TRUE(all_near(d_p.download(), p, 1e-7, 2e-6));
  EXPECT_TRUE(all_near(d_m.download(), m, 1e-7, 2e-6));
  EXPECT_TRUE(all_near(d_v.download(), v, 1e-9, 2e-6));
  EXPECT_EQ(d_p16.download(), rounded(d_p.download()));
  EXPECT_TRUE(all_within_bf16_ulps(d_p16.download(), p16));
  // Without the copy the update is the same.
  DeviceArray<float> d_p2(p), d_m2(m), d_v2(v), d_g2(random_floats(n, 30));
  cuda::adamw_update(d_p2.get(), d_g2.get(), d_m2.get(), d_v2.get(), n, h, nullptr, stream);
  sync();
  const auto g2 = random_floats(n, 30);
  adamw_update(p.data(), g2.data(), m.data(), v.data(), n, h, nullptr);
  EXPECT_TRUE(all_near(d_p2.download(), p, 1e-7, 2e-6));
}

// The update reading its step's values from device memory (the form a CUDA graph replays) is the
// update given them by value, bit for bit, on the device; and the CPU's form of it is the CPU's.
TEST_F(CudaAdamW, UpdateAtReadsTheStepFromDeviceMemoryAsTheByValueUpdate) {
  const int64_t n = 4099;
  const std::vector<float> p = random_floats(n, 50), m = random_floats(n, 51, 0.1f), v(n, 0.01f),
                           g = random_floats(n, 52);
  AdamWHyper h;
  h.lr = 3e-3f;
  h.weight_decay = 0.1f;
  h.grad_scale = 0.25f;
  h.step = 7;
  const AdamWStep step{h.lr, h.grad_scale, math::adamw_bias_correction(h.beta1, h.step),
                       math::adamw_bias_correction(h.beta2, h.step)};
  DeviceArray<float> d_g(g), p1(p), m1(m), v1(v), p2(p), m2(m), v2(v);
  DeviceArray<bf16_t> c1(n), c2(n);
  DeviceArray<AdamWStep> d_step(std::vector<AdamWStep>{step});
  cuda::adamw_update(p1.get(), d_g.get(), m1.get(), v1.get(), n, h, c1.get(), stream);
  AdamWHyper ignored = h;
  ignored.lr = 99.0f;  // the values in memory are the ones used
  ignored.grad_scale = 99.0f;
  ignored.step = 1;
  cuda::adamw_update_at(p2.get(), d_g.get(), m2.get(), v2.get(), n, ignored, d_step.get(), c2.get(),
                        stream);
  sync();
  EXPECT_EQ(p1.download(), p2.download());
  EXPECT_EQ(m1.download(), m2.download());
  EXPECT_EQ(v1.download(), v2.download());
  EXPECT_EQ(c1.download(), c2.download());
  std::vector<float> hp = p, hm = m, hv = v, hp2 = p, hm2 = m, hv2 = v;
  adamw_update(hp.data(), g.data(), hm.data(), hv.data(), n, h);
  adamw_update_at(hp2.data(), g.data(), hm2.data(), hv2.data(), n, ignored, &step);
  EXPECT_EQ(hp, hp2);
  EXPECT_EQ(hv, hv2);
}

// Launches since reset_launches(), where the device counts them (the emulated one).
bool launches_counted() {
#ifdef BOOSTLM_CUDA_EMULATOR
  return true;
#else
  return false;
#endif
}
void reset_launches() {
#ifdef BOOSTLM_CUDA_EMULATOR
  cuda_emulator::reset_kernel_counters();
#endif
}
int64_t launches() {
  int64_t count = 0;
#ifdef BOOSTLM_CUDA_EMULATOR
  for (const cuda_emulator::KernelCounters& c : cuda_emulator::kernel_counters())
    count += c.launches;
#endif
  return count;
}

// The multi-tensor update is one adamw_update_at per part, bit for bit: parts of every size (an
// empty one, a one-element one, one spanning several blocks), with and without the bf16 copy and
// their own weight decays, more of them than one launch carries, the moments and the copy offset
// from the weights as ZeRO-1's shard and the copy's start make them; elements of no part are not
// touched. Its launches: one per AdamWPartBatch::kMax parts.
TEST_F(CudaAdamW, PartsUpdateIsOneUpdatePerPartInOneLaunchPerBatch) {
  std::vector<AdamWPart> parts;
  int64_t at = 5;  // elements [0, 5) belong to no part
  for (int i = 0; i < 150; ++i) {
    const int64_t n = i == 3 ? 0 : i == 4 ? 1 : i % 37 == 0 ? 70000 : 17 + 13 * i;
    parts.push_back({at, at + n, i % 3 == 0 ? 0.0f : 0.1f, i % 5 != 1});
    at += n + (i % 4 == 0 ? 3 : 0);  // and a few gaps
  }
  const int64_t total = at, moments_begin = 2, bf16_begin = 1;
  const std::vector<float> p = random_floats(total, 60), g = random_floats(total, 61),
                           m = random_floats(total - moments_begin, 62, 0.1f),
                           v(total - moments_begin, 0.02f);
  const std::vector<bf16_t> copy(total - bf16_begin, bf16_t{0x7fc0});
  AdamWHyper h;
  h.beta1 = 0.8f;
  const AdamWStep step{2e-3f, 0.5f, math::adamw_bias_correction(h.beta1, 3),
                       math::adamw_bias_correction(h.beta2, 3)};
  DeviceArray<AdamWStep> d_step(std::vector<AdamWStep>{step});
  DeviceArray<float> d_g(g), p1(p), m1(m), v1(v), p2(p), m2(m), v2(v);
  DeviceArray<bf16_t> c1(copy), c2(copy);
  for (const AdamWPart& part : parts) {
    AdamWHyper part_h = h;
    part_h.weight_decay = part.weight_decay;
    const int64_t i = part.begin;
    cuda::adamw_update_at(p1.get() + i, d_g.get() + i, m1.get() + (i - moments_begin),
                          v1.get() + (i - moments_begin), part.end - i, part_h, d_step.get(),
                          part.rounded ? c1.get() + (i - bf16_begin) : nullptr, stream);
  }
  sync();
  reset_launches();
  cuda::adamw_update_parts_at(p2.get(), d_g.get(), m2.get(), v2.get(), moments_begin, parts, h,
                              d_step.get(), c2.get(), bf16_begin, stream);
  sync();
  const int64_t update_launches = launches();
  EXPECT_EQ(p2.download(), p1.download());
  EXPECT_EQ(m2.download(), m1.download());
  EXPECT_EQ(v2.download(), v1.download());
  EXPECT_EQ(c2.download(), c1.download());
  EXPECT_EQ(p2.download()[0], p[0]);
  if (launches_counted()) {
    EXPECT_EQ(update_launches, (150 + cuda::AdamWPartBatch::kMax - 1) / cuda::AdamWPartBatch::kMax);
  }
  // The CPU's form: one adamw_update_at per part, the same as the device's to a few ulps.
  std::vector<float> hp = p, hm = m, hv = v;
  std::vector<bf16_t> hc = copy;
  adamw_update_parts_at(hp.data(), g.data(), hm.data(), hv.data(), moments_begin, parts, h, &step,
                        hc.data(), bf16_begin);
  EXPECT_TRUE(all_near(p2.download(), hp, 1e-7, 2e-6));
  EXPECT_TRUE(all_near(m2.download(), hm, 1e-7, 2e-6));
}

// The ranges' sums in batches are each range's own sum_squares, bit for bit, across more ranges
// than one batch carries (empty ones included), in two launches per batch.
TEST_F(CudaAdamW, SumSquaresRangesAreEachRangesOwnSum) {
  std::vector<IndexRange> ranges;
  int64_t at = 0;
  for (int i = 0; i < 200; ++i) {
    const int64_t n = i % 50 == 7 ? 0 : i % 61 == 0 ? 300000 : 11 * i + 1;
    ranges.push_back({at, at + n});
    at += n + i % 2;
  }
  const auto x = random_floats(at, 63);
  DeviceArray<float> d_x(x);
  DeviceArray<double> own(ranges.size()), batched(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    const int64_t n = ranges[i].end - ranges[i].begin;
    const size_t bytes = cuda::sum_squares_workspace_bytes(n);
    DeviceArray<unsigned char> workspace(bytes);
    cuda::sum_squares(d_x.get() + ranges[i].begin, n, own.get() + i, workspace.get(), bytes,
                      stream);
    sync();
  }
  const size_t bytes = cuda::sum_squares_ranges_workspace_bytes(ranges);
  DeviceArray<unsigned char> workspace(bytes);
  reset_launches();
  cuda::sum_squares_ranges(d_x.get(), ranges, batched.get(), workspace.get(), bytes, stream);
  sync();
  const int64_t sum_launches = launches();
  EXPECT_EQ(batched.download(), own.download());
  if (launches_counted()) {
    EXPECT_EQ(sum_launches, 2 * ((200 + cuda::SumPartBatch::kMax - 1) / cuda::SumPartBatch::kMax));
  }
}

// The gradient norm's ranges summed into device memory (what the norm's graph computes): the CPU's
// sum to 1e-12, the same bits twice, 0 for no ranges.
TEST_F(CudaAdamW, SumSquaresRangesIntoIsTheReadBackSum) {
  const auto x = random_floats(50000, 53);
  const std::vector<IndexRange> ranges = {{0, 100}, {300, 20000}, {20000, 49999}};
  DeviceArray<float> d_x(x);
  DeviceArray<double> d_result(3);
  const KernelTable& table = cuda::kernel_table();  // on the buffers' stream
  table.sum_squares_ranges_into(d_x.get(), ranges, d_result.get());
  table.sum_squares_ranges_into(d_x.get(), {}, d_result.get() + 1);
  table.sum_squares_ranges_into(d_x.get(), ranges, d_result.get() + 2);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<double> result = d_result.download();
  EXPECT_EQ(result[0], result[2]);
  EXPECT_NEAR(result[0], sum_squares_ranges(x.data(), ranges), 1e-12 * result[0]);
  EXPECT_EQ(result[1], 0.0);
}

// A whole step's norm and decision on the device (train/step.h): two parts added as the host adds
// them, in place, and the skip where any micro-batch's loss is not finite.
TEST_F(CudaAdamW, NormPartsAndClipStepAreTheHostsOnTheDevice) {
  const std::vector<double> parts = {0.1, 1e17};
  DeviceArray<double> d_parts(parts);
  const KernelTable& table = cuda::kernel_table();  // on the buffers' stream
  table.sum_values_into(d_parts.get(), 2, d_parts.get());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(d_parts.download()[0], parts[0] + parts[1]);
  const std::vector<double> sums = {16.0, 9.0};
  DeviceArray<double> d_sums(sums);
  DeviceArray<float> d_losses(std::vector<float>{2.5f, 3.0f, INFINITY});
  DeviceArray<AdamWStep> d_step(1);
  auto decide = [&](int64_t losses) {
    table.adamw_clip_step(d_sums.get(), 2, d_losses.get(), losses, 1.0f, d_step.get());
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return d_step.download()[0];
  };
  const AdamWStep two = decide(2), three = decide(3);
  EXPECT_EQ(two.skip, 0);
  EXPECT_EQ(two.grad_scale, 1.0f / 5.0f);
  EXPECT_EQ(three.skip, 1);
}

// Σx² in double: to 1e-12 relative of the CPU's double sum (another order), the same bits on a
// second run, and 0 for no elements.
TEST_F(CudaAdamW, SumSquaresIsTheDoubleSumAndDeterministic) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{4097}, (int64_t{1} << 20) + 3}) {
    SCOPED_TRACE(::testing::Message() << "n " << n);
    const auto x = random_floats(n, 40);
    const double expected = sum_squares(x.data(), n);
    DeviceArray<float> d_x(x);
    DeviceArray<double> d_result(2);
    const size_t bytes = cuda::sum_squares_workspace_bytes(n);
    DeviceArray<unsigned char> workspace(bytes);
    cuda::sum_squares(d_x.get(), n, d_result.get(), workspace.get(), bytes, stream);
    cuda::sum_squares(d_x.get(), n, d_result.get() + 1, workspace.get(), bytes, stream);
    sync();
    const std::vector<double> result = d_result.download();
    EXPECT_NEAR(result[0], expected, 1e-12 * expected);
    EXPECT_EQ(result[0], result[1]);
    if (n == 0) {
      EXPECT_EQ(result[0], 0.0);
    }
  }
}

TEST_F(CudaAdamW, ScaleInplaceIsTheProduct) {
  const int64_t n = 70001;
  const auto x = random_floats(n, 41);
  std::vector<float> expected = x;
  scale_inplace(expected.data(), n, 0.37f);
  DeviceArray<float> d_x(x);
  cuda::scale_inplace(d_x.get(), n, 0.37f, stream);
  sync();
  EXPECT_TRUE(all_near(d_x.download(), expected, 0, 0));  // one rounding, the same on both
}

// Repeated tokens (few distinct ones over many positions) and vocabularies below and above the
// scatter's bucket count. Gather and scatter add the same values in the same order as the CPU:
// exact.
TEST_F(CudaEmbedding, ForwardAndBackwardAreTheCpuBackendsExactly) {
  struct Shape {
    int64_t V, D, n, distinct;
  };
  for (const Shape& s : {Shape{50, 33, 200, 50}, Shape{1000, 300, 3000, 100}, Shape{7, 1, 9, 3}}) {
    SCOPED_TRACE(::testing::Message() << "V " << s.V << " D " << s.D << " n " << s.n);
    Rng rng(42);
    std::vector<int32_t> tokens(s.n);
    for (auto& t : tokens) t = static_cast<int32_t>(rng.below(s.distinct) * (s.V / s.distinct));
    const auto weight = random_floats(s.V * s.D, 43), dout = random_floats(s.n * s.D, 44);
    const auto dweight0 = random_floats(s.V * s.D, 45);
    std::vector<float> out(s.n * s.D), dweight = dweight0;
    embedding_forward(tokens.data(), s.n, weight.data(), s.V, s.D, out.data());
    embedding_backward(tokens.data(), s.n, dout.data(), s.V, s.D, dweight.data());

    DeviceArray<int32_t> d_tokens(tokens);
    DeviceArray<float> d_weight(weight), d_dout(dout), d_out(s.n * s.D), d_dweight(dweight0);
    cuda::embedding_forward(d_tokens.get(), s.n, d_weight.get(), s.V, s.D, d_out.get(), stream);
    cuda::embedding_backward(d_tokens.get(), s.n, d_dout.get(), s.V, s.D, d_dweight.get(), stream);
    sync();
    EXPECT_TRUE(all_near(d_out.download(), out, 0, 0));
    EXPECT_TRUE(all_near(d_dweight.download(), dweight, 0, 0));

    // The vocabulary-parallel form: this shard holds rows [begin, begin + rows).
    const int64_t begin = s.V / 3, rows = s.V / 2;
    const auto shard_weight = random_floats(rows * s.D, 46);
    const auto shard_dweight0 = random_floats(rows * s.D, 47);
    std::vector<float> shard_out(s.n * s.D), shard_dweight = shard_dweight0;
    embedding_shard_forward(tokens.data(), s.n, shard_weight.data(), begin, rows, s.D,
                            shard_out.data());
    embedding_shard_backward(tokens.data(), s.n, dout.data(), begin, rows, s.D,
                             shard_dweight.data());
    DeviceArray<float> d_shard_weight(shard_weight), d_shard_out(s.n * s.D),
        d_shard_dweight(shard_dweight0);
    cuda::embedding_shard_forward(d_tokens.get(), s.n, d_shard_weight.get(), begin, rows, s.D,
                                  d_shard_out.get(), stream);
    cuda::embedding_shard_backward(d_tokens.get(), s.n, d_dout.get(), begin, rows, s.D,
                                   d_shard_dweight.get(), stream);
    sync();
    EXPECT_TRUE(all_near(d_shard_out.download(), shard_out, 0, 0));
    EXPECT_TRUE(all_near(d_shard_dweight.download(), shard_dweight, 0, 0));
  }
}

// Forward, backward, their bf16 forms and the incremental form, on rows with a padded stride
// (padding untouched). One rotation per pair: a few ulps.
TEST_F(CudaRope, AllFormsMatchTheCpuBackend) {
  const int64_t B = 3, T = 20, heads = 3, hd = 16, ld = heads * hd + 5, rows = B * T;
  const RopeTable table = make_rope_table(32, hd, 10000.0f);
  DeviceArray<float> d_cos(std::vector<float>(table.cos.begin(), table.cos.end())),
      d_sin(std::vector<float>(table.sin.begin(), table.sin.end()));
  const DeviceRopeTable device_table{d_cos.get(), d_sin.get(), table.max_pos, table.head_dim};
  const auto x0 = random_floats(rows * ld, 50);

  using Plain = void (*)(float*, int64_t, int64_t, int64_t, int64_t, const RopeTable&);
  using DevicePlain =
      void (*)(float*, int64_t, int64_t, int64_t, int64_t, const DeviceRopeTable&, cudaStream_t);
  using Rounded = void (*)(const float*, int64_t, int64_t, int64_t, int64_t, const RopeTable&,
                           bf16_t*, int64_t);
  using DeviceRounded = void (*)(const float*, int64_t, int64_t, int64_t, int64_t,
                                 const DeviceRopeTable&, bf16_t*, int64_t, cudaStream_t);
  struct Form {
    Plain plain;
    DevicePlain device_plain;
    Rounded rounded;
    DeviceRounded device_rounded;
  };
  for (const Form& f :
       {Form{rope_forward, cuda::rope_forward, rope_forward_bf16, cuda::rope_forward_bf16},
        Form{rope_backward, cuda::rope_backward, rope_backward_bf16, cuda::rope_backward_bf16}}) {
    std::vector<float> x = x0, x_rounded_form = x0;
    const int64_t ldo = heads * hd + 2;
    std::vector<bf16_t> out(rows * ldo, 0x4321);
    f.plain(x.data(), ld, B, T, heads, table);
    f.rounded(x_rounded_form.data(), ld, B, T, heads, table, out.data(), ldo);

    DeviceArray<float> d_x(x0), d_x_rounded_form(x0);
    DeviceArray<bf16_t> d_out(std::vector<bf16_t>(rows * ldo, 0x4321));
    f.device_plain(d_x.get(), ld, B, T, heads, device_table, stream);
    f.device_rounded(d_x_rounded_form.get(), ld, B, T, heads, device_table, d_out.get(), ldo,
                     stream);
    sync();
    EXPECT_TRUE(all_near(d_x.download(), x, 1e-6, 1e-6));
    EXPECT_TRUE(all_near(d_x_rounded_form.download(), x0, 0, 0));  // only read
    EXPECT_EQ(x_rounded_form, x0);
    // out: each rotated row rounded from the kernel's own fp32 values; the padding untouched.
    std::vector<bf16_t> expected(rows * ldo, 0x4321);
    const std::vector<float> rotated = d_x.download();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < heads * hd; ++c)
        expected[r * ldo + c] = float_to_bf16(rotated[r * ld + c]);
    EXPECT_EQ(d_out.download(), expected);
    EXPECT_TRUE(all_within_bf16_ulps(d_out.download(), out));
  }

  // Incremental decoding: 9 rows at positions 7..15.
  std::vector<float> x = x0;
  rope_forward_at(x.data(), ld, 9, heads, table, 7);
  DeviceArray<float> d_x(x0);
  cuda::rope_forward_at(d_x.get(), ld, 9, heads, device_table, 7, stream);
  sync();
  EXPECT_TRUE(all_near(d_x.download(), x, 1e-6, 1e-6));
}

}  // namespace
}  // namespace boostlm
