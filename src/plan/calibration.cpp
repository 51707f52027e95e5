#include "plan/calibration.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>

#include "comm/mpi_runtime.h"
#include "comm/overlap.h"
#include "core/profile.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/rmsnorm.h"
#include "plan/cost.h"

namespace boostlm::plan {

namespace {

// For fixed h: minimise Σ ((a·x_i + b − t_i)/t_i)², i.e. weighted least squares in (a, b).
struct Linear {
  double a = 0, b = 0, rms = 0;
};
Linear relative_least_squares(const std::vector<double>& x, const std::vector<double>& t) {
  double sxx = 0, sx = 0, s1 = 0, sxt = 0, st = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double w = 1.0 / (t[i] * t[i]);
    sxx += w * x[i] * x[i];
    sx += w * x[i];
    s1 += w;
    sxt += w * x[i] * t[i];
    st += w * t[i];
  }
  Linear l;
  const double det = sxx * s1 - sx * sx;
  l.a = det > 0 ? (sxt * s1 - sx * st) / det : 0;
  l.b = det > 0 ? (sxx * st - sx * sxt) / det : 0;
  if (l.b < 0 || l.a <= 0) {  // a negative overhead is noise: fit the line through the origin
    l.b = 0;
    l.a = sxt / sxx;
  }
  double e = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double r = (l.a * x[i] + l.b - t[i]) / t[i];
    e += r * r;
  }
  l.rms = std::sqrt(e / std::max<size_t>(1, x.size()));
  return l;
}

double saturation(double x, double h) {
  return x / (x + h);
}

// Runs `body` on every rank of `sync` at once (a barrier before each repetition; sync may be
// nullptr): the seconds of `reps` repetitions after a warm-up, each the slowest rank's, sorted.
template <typename Body>
std::vector<double> time_reps(Communicator* sync, int reps, Body&& body) {
  std::vector<double> out;
  for (int i = 0; i <= reps; ++i) {
    if (sync) sync->barrier();
    const double t0 = now_s();
    body();
    float dt = static_cast<float>(now_s() - t0);
    if (sync) sync->all_reduce_max_host(&dt, 1);  // the slowest rank, as a TP step waits for it
    if (i > 0) out.push_back(dt);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Kernels: the fastest repetition (what the kernel costs when nothing else interferes).
template <typename Body>
double time_best(Communicator* sync, int reps, Body&& body) {
  return time_reps(sync, reps, body).front();
}

}  // namespace

GemmFit fit_gemm_curve(const std::vector<GemmSample>& samples) {
  GemmFit best;
  best.rms_relative_error = 1e30;
  std::vector<double> x(samples.size()), t(samples.size());
  for (size_t i = 0; i < samples.size(); ++i) t[i] = samples[i].seconds;
  for (double h = 0; h <= 1024; h += h < 64 ? 2 : 8) {
    for (size_t i = 0; i < samples.size(); ++i) {
      const auto& s = samples[i];
      const double g = saturation(s.m, h) * saturation(s.n, h) * saturation(s.k, h);
      x[i] = 2.0 * s.m * s.n * s.k / g;
    }
    const Linear l = relative_least_squares(x, t);
    if (l.rms < best.rms_relative_error) {
      best.rms_relative_error = l.rms;
      best.curve = {1.0 / l.a, 1.0, h};
      best.overhead_s = l.b;
    }
  }
  return best;
}

LineFit fit_line(const std::vector<double>& x, const std::vector<double>& seconds) {
  const Linear l = relative_least_squares(x, seconds);
  return {l.b, l.a, l.rms};
}

std::pair<double, double> fit_attention(double hd1, double e1, double hd2, double e2) {
  // e1/e2 = hd1 (hd2 + h) / (hd2 (hd1 + h))  ⇒  h = hd1·hd2·(e2 − e1) / (e1·hd2 − e2·hd1)
  const double den = e1 * hd2 - e2 * hd1;
  double h = den != 0 ? hd1 * hd2 * (e2 - e1) / den : 0;
  if (!(h >= 0) || !std::isfinite(h)) h = 0;
  const double top = std::max(e1 * (hd1 + h) / hd1, e2 * (hd2 + h) / hd2);
  return {std::min(1.0, top), h};
}

namespace {

// GEMM shapes like the models': M tokens, N and K from thin latents to wide MLPs. Each shape is
// timed as the three products a projection runs (forward x·W, input gradient dy·Wᵀ, weight
// gradient xᵀ·dy accumulated), and the curve is fitted to their mean. In bf16 the operands arrive
// already rounded, as in training (weights once per step, shared inputs once).
std::vector<GemmSample> measure_gemms(DType dtype, Communicator* sync) {
  constexpr int64_t kMax = 2048 * 2048;
  std::vector<float> a(kMax, 0.01f), b(kMax, 0.02f), c(kMax);
  std::vector<bf16_t> a16(kMax), b16(kMax);
  round_to_bf16(a.data(), 1, kMax, kMax, a16.data());
  round_to_bf16(b.data(), 1, kMax, kMax, b16.data());
  const bool bf16 = dtype == DType::bf16;
  auto run = [&](Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float beta) {
    const GemmInput A(a.data(), bf16 ? a16.data() : nullptr, ta == Trans::N ? k : m);
    const GemmInput B(b.data(), bf16 ? b16.data() : nullptr, tb == Trans::N ? n : k);
    gemm(ta, tb, m, n, k, 1.0f, A, B, beta, c.data(), n, dtype);
  };
  std::vector<GemmSample> out;
  const int64_t dims[] = {64, 128, 256, 512, 1024, 2048};
  for (int64_t m : {256, 2048})
    for (int64_t n : dims)
      for (int64_t k : dims) {
        const double work = 2.0 * m * n * k;
        const int reps = work > 4e9 ? 1 : work > 5e8 ? 2 : 4;
        double total = 0;
        for (auto [ta, tb, beta] :
             {std::tuple{Trans::N, Trans::N, 0.0f}, std::tuple{Trans::N, Trans::T, 0.0f},
              std::tuple{Trans::T, Trans::N, 1.0f}})
          total += time_best(sync, reps, [&] { run(ta, tb, m, n, k, beta); });
        out.push_back({m, n, k, total / 3});
      }
  return out;
}

// The engine's element-wise kernels (add, SiLU, SwiGLU, RMSNorm) at activation sizes: bytes moved
// against seconds, one line through them.
LineFit measure_elementwise(Communicator* sync) {
  std::vector<double> bytes, seconds;
  const int64_t cols = 512;
  std::vector<float> x(8 << 20, 0.5f), y(8 << 20, 0.25f), z(8 << 20), gamma(cols, 1.0f),
      rstd(16384);
  for (int64_t elements : {int64_t{64} << 10, int64_t{256} << 10, int64_t{1} << 20,
                           int64_t{4} << 20, int64_t{8} << 20}) {
    const int64_t rows = elements / cols;
    const double s = time_best(sync, 5, [&] {
      add(x.data(), y.data(), z.data(), elements);
      silu_forward(x.data(), cols, rows, cols, z.data(), cols);
      swiglu_forward(x.data(), y.data(), elements, true, z.data());
      rmsnorm_forward(x.data(), cols, gamma.data(), rows, cols, 1e-6f, z.data(), cols, rstd.data());
    });
    bytes.push_back(static_cast<double>(elements) * 4 * (3 + 2 + 3 + 2));
    seconds.push_back(s);
  }
  return fit_line(bytes, seconds);
}

// The fused attention's rate (forward + backward, FLOPs as the model counts them) at head_dim.
double attention_flops_per_s(int64_t head_dim, Communicator* sync) {
  const int64_t B = 8, T = 256, width = 512, heads = width / head_dim, N = B * T;
  std::vector<float> q(N * width, 0.1f), k(N * width, 0.2f), v(N * width, 0.3f), o(N * width),
      lse(B * heads * T), dq(N * width), dk(N * width), dv(N * width), dout(N * width, 0.01f);
  const AttentionShape s{B, T, heads, heads, head_dim};
  const double seconds = time_best(sync, 5, [&] {
    attention_forward(s, q.data(), width, k.data(), width, v.data(), width, o.data(), width,
                      lse.data());
    attention_backward(s, q.data(), width, k.data(), width, v.data(), width, o.data(), width,
                       lse.data(), dout.data(), width, dq.data(), width, dk.data(), width,
                       dv.data(), width);
  });
  const double forward = 2.0 * head_dim * T * (T + 1.0) * heads * B;
  return 3.5 * forward / seconds;
}

double physical_memory_bytes() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

std::string percent(double x) {
  std::ostringstream os;
  os.precision(3);
  os << 100 * x << "%";
  return os.str();
}

}  // namespace

DeviceMeasurement measure_device(int threads, Communicator* sync) {
  omp_set_num_threads(threads);
  DeviceMeasurement out;
  Device& d = out.device;
  const int ranks = sync ? sync->size() : 1;
  d.memory_bytes = physical_memory_bytes() / ranks;
  for (DType dtype : {DType::f32, DType::bf16}) {
    const GemmFit fit = fit_gemm_curve(measure_gemms(dtype, sync));
    d.gemm[dtype] = fit.curve;
    if (dtype == DType::f32) d.gemm_overhead_s = fit.overhead_s;
    std::ostringstream note;
    note << to_string(dtype) << " GEMM curve fitted to 72 shapes (M 256/2048, N and K 64..2048), "
         << "rms error " << percent(fit.rms_relative_error);
    out.notes.push_back(note.str());
  }
  const LineFit ew = measure_elementwise(sync);
  d.memory_bandwidth = 1.0 / ew.per_unit;
  d.elementwise_efficiency = 1.0;  // the measured bandwidth is already what kernels achieve
  d.kernel_overhead_s = ew.fixed / 4;
  d.graph_node_overhead_s = d.kernel_overhead_s;  // a CPU runs graphs' calls as they come
  out.notes.push_back(
      "element-wise bandwidth: add, SiLU, SwiGLU, RMSNorm at 64K..8M elements, rms "
      "error " +
      percent(ew.rms_relative_error));
  // Measured in fp32 against the fp32 peak; the planner applies the same efficiency to the bf16
  // peak for bf16 runs, which is optimistic: the engine's bf16 attention ran 1.3-1.5x faster than
  // its fp32 one on this CPU against a 2x higher peak (the softmax and the packing stay fp32 work).
  const double peak = d.gemm.at(DType::f32).peak_flops;
  const auto [e_max, half] = fit_attention(64, attention_flops_per_s(64, sync) / peak, 128,
                                           attention_flops_per_s(128, sync) / peak);
  d.attention_max_efficiency = e_max;
  d.attention_half_head_dim = half;
  out.notes.push_back("attention: forward + backward at B 8 x T 256, head dims 64 and 128");
  return out;
}

Link fit_link(const std::vector<double>& bytes, const std::vector<double>& seconds,
              double min_bytes, double& spread) {
  Link l;
  l.alpha_s = seconds.front();
  std::vector<double> log_bandwidth;
  for (size_t i = 0; i < bytes.size(); ++i)
    if (bytes[i] >= min_bytes)
      log_bandwidth.push_back(std::log(bytes[i] / std::max(seconds[i] - l.alpha_s, 1e-12)));
  double mean = 0, var = 0;
  for (double b : log_bandwidth) mean += b / log_bandwidth.size();
  for (double b : log_bandwidth) var += (b - mean) * (b - mean) / log_bandwidth.size();
  l.bandwidth = std::exp(mean);
  l.efficiency = 1.0;
  spread = std::exp(std::sqrt(var)) - 1;
  return l;
}

// All-reduce from 1 KiB to 64 MiB, the median repetition of each (not the fastest: whether a
// buffer sits in cache varies, and training meets both cases).
Link measure_link(Communicator& comm, std::string& note) {
  std::vector<double> bytes, seconds;
  constexpr int64_t kMaxElements = int64_t{16} << 20;
  std::vector<float> buf(kMaxElements, 1.0f);
  const double factor = ring_factor(Collective::all_reduce, comm.size());
  for (int64_t n = 256; n <= kMaxElements; n *= 4) {
    const auto reps =
        time_reps(&comm, n > (1 << 20) ? 5 : 11, [&] { comm.all_reduce_host(buf.data(), n); });
    bytes.push_back(factor * n * 4.0);
    seconds.push_back(reps[reps.size() / 2]);
  }
  double spread = 0;
  Link l = fit_link(bytes, seconds, factor * (1 << 20), spread);
  for (size_t i = 0; i < bytes.size(); ++i) l.measured.emplace_back(bytes[i], seconds[i]);
  std::ostringstream os;
  os << "MPI all-reduce over " << comm.size() << " ranks, 1 KiB..64 MiB, median of repetitions; "
     << "alpha from 1 KiB, beta the geometric mean over 1..64 MiB (spread " << percent(spread)
     << "), the planner prices calls from these points; us per call:";
  for (double s : seconds) os << " " << static_cast<int>(s * 1e6);
  note = os.str();
  return l;
}

double measure_overlap_cost(Communicator& comm, const Link& link, std::string& note) {
  if (comm.size() < 2 || !mpi_thread_multiple()) {
    note = "overlap cost not measured (needs 2 ranks and MPI_THREAD_MULTIPLE): 0";
    return 0;
  }
  // A GEMM segment of about 10 ms on one core, and the largest all-reduce the link moves in at
  // most 70% of that (the measured points): every transfer can hide behind the other chunk's GEMM,
  // and carries as many bytes as can be hidden, so that their cost stands out of the noise.
  constexpr int64_t kM = 1024, kN = 512, kK = 1024;
  constexpr int kSegments = 12;  // per chunk
  std::vector<float> a(kM * kK, 0.01f), b(kK * kN, 0.01f), c0(kM * kN), c1(kM * kN);
  auto segment = [&](std::vector<float>& c) {
    gemm(Trans::N, Trans::N, kM, kN, kK, 1.0f, a.data(), kK, b.data(), kN, 0.0f, c.data(), kN,
         DType::f32);
  };
  const double alone = time_reps(&comm, 5, [&] {
    for (int i = 0; i < 2 * kSegments; ++i) segment(i % 2 ? c1 : c0);
  })[2];
  const double budget = 0.7 * alone / (2 * kSegments);
  double wire = 4096;
  while (wire < (64 << 20) && link.call_seconds(wire * 1.25) < budget) wire *= 1.25;
  const int64_t count =
      static_cast<int64_t>(wire / ring_factor(Collective::all_reduce, comm.size()) / 4);
  std::vector<float> x0(count, 1.0f), x1(count, 1.0f);
  CommOverlap overlap(comm);
  auto chunk = [&](std::vector<float>& c, std::vector<float>& x) {
    for (int i = 0; i < kSegments; ++i) {
      segment(c);
      comm.all_reduce(x.data(), count);
    }
  };
  const std::vector<std::function<void()>> tasks = {[&] { chunk(c0, x0); }, [&] { chunk(c1, x1); }};
  const double overlapped = time_reps(&comm, 5, [&] { overlap.run(tasks); })[2];
  const double last = time_reps(&comm, 5, [&] { comm.all_reduce_host(x0.data(), count); })[2];
  const double bytes = 2.0 * kSegments * ring_factor(Collective::all_reduce, comm.size()) *
                       static_cast<double>(count) * 4;
  const double cost = std::max(0.0, overlapped - alone - last) / bytes;
  std::ostringstream os;
  os << "overlap cost: 2 chunks x " << kSegments << " segments of a " << kM << "x" << kN << "x"
     << kK << " fp32 GEMM (" << static_cast<int>(alone / (2 * kSegments) * 1e6)
     << " us each) and a " << static_cast<int64_t>(count * 4) << "-byte all-reduce ("
     << static_cast<int>(last * 1e6) << " us): " << static_cast<int>(overlapped * 1e3)
     << " ms overlapped against " << static_cast<int>(alone * 1e3) << " ms of GEMMs, " << cost * 1e9
     << " ns per byte on the wire (medians of 5)";
  note = os.str();
  return cost;
}

}  // namespace boostlm::plan
