// Measuring this machine for the performance model (`boostlm calibrate`): the GEMM efficiency
// curve, the element-wise bandwidth and the attention kernel's rate on a given number of threads,
// and the α–β of MPI all-reduce over a communicator. The fits are plain functions of the samples,
// so tests can check them on synthetic data.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/dtype.h"
#include "plan/hardware.h"

namespace boostlm::plan {

struct GemmSample {
  int64_t m, n, k;
  double seconds;
};

struct GemmFit {
  GemmCurve curve;  // peak_flops is the fitted asymptotic rate, max_efficiency 1
  double overhead_s = 0;
  double rms_relative_error = 0;
};

// Least squares in relative error of  t = 2mnk / (R · g(m)g(n)g(k)) + overhead,  g(x) = x/(x+h):
// h by a search over a grid, R and the overhead in closed form for each h.
GemmFit fit_gemm_curve(const std::vector<GemmSample>& samples);

// t = fixed + x · per_unit, least squares in relative error (both clamped at ≥ 0).
struct LineFit {
  double fixed = 0, per_unit = 0, rms_relative_error = 0;
};
LineFit fit_line(const std::vector<double>& x, const std::vector<double>& seconds);

// Efficiency E · hd/(hd + h) through two measured (head_dim, efficiency) points; h ≥ 0, E ≤ 1.
std::pair<double, double> fit_attention(double hd1, double eff1, double hd2, double eff2);

struct DeviceMeasurement {
  Device device;
  std::vector<std::string> notes;  // the fits' residuals, for the file's sources
};

// The device as `threads` OpenMP threads of this process see it, with every rank of `sync`
// measuring at the same time (so ranks share the machine as they do in training).
DeviceMeasurement measure_device(int threads, Communicator* sync);

// α = the first (smallest) message's time; β = the geometric mean of the bandwidths
// bytes/(t − α) of the messages of at least `min_bytes` (least squares in log time, α fixed). On a
// CPU a layer's messages straddle the last-level cache, so bandwidth falls with size and one β
// must average the range the engine uses. `spread`: the geometric standard deviation − 1.
Link fit_link(const std::vector<double>& bytes, const std::vector<double>& seconds,
              double min_bytes, double& spread);

// α and β of all-reduce over `comm` (every rank calls it); also fills `note`.
Link measure_link(Communicator& comm, std::string& note);

// Link::overlap_cost_s_per_byte of `link` (measured over `comm` by measure_link), as --tp-overlap
// meets it: two chunks on a CommOverlap, each alternating a GEMM and an all-reduce small enough to
// hide behind the other chunk's GEMM, against the same GEMMs alone; the extra time, less the last
// all-reduce (nothing to hide behind), per byte on the wire. Needs MPI_THREAD_MULTIPLE (0 and a
// note saying so without it). Every rank calls it; fills `note`.
double measure_overlap_cost(Communicator& comm, const Link& link, std::string& note);

}  // namespace boostlm::plan
