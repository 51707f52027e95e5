#include "plan/roofline.h"

#include <algorithm>

#include "plan/cost.h"

namespace boostlm::plan {

const char* to_string(KernelClass kind) {
  switch (kind) {
    case KernelClass::gemm:
      return "gemm";
    case KernelClass::attention:
      return "attention";
    case KernelClass::cuda_core:
      return "cuda-core";
    case KernelClass::memory:
      return "memory";
    case KernelClass::copy:
      return "copy";
  }
  return "?";
}

double RooflineRow::seconds() const {
  return std::max(compute_s, memory_s) + overhead_s;
}

double Roofline::tensor_share() const {
  const double all = static_cast<double>(tensor_flops) + static_cast<double>(other_flops);
  return all > 0 ? tensor_flops / all : 0.0;
}

namespace {

// Launches from the host pay the launch overhead of their kind; those run as graph nodes the
// device's per-node overhead instead.
double launch_overhead(const DeviceKernelCount& c, double per_launch, const Device& device) {
  const double from_host = static_cast<double>(c.launches - c.graph_launches);
  return from_host * per_launch +
         static_cast<double>(c.graph_launches) * launch_seconds(device, per_launch, true);
}

// Fused attention's share of the bf16 peak at its head dimension.
double attention_efficiency(const Device& device, const DeviceKernelCount& c) {
  const double hd = c.dim > 0 ? c.dim : 128;
  const double half = device.attention_half_head_dim;
  return device.attention_max_efficiency * (half > 0 ? hd / (hd + half) : 1.0);
}

RooflineRow price(const Device& device, const DeviceKernelCount& c) {
  RooflineRow row;
  row.count = c;
  const double bytes = static_cast<double>(c.bytes_read) + static_cast<double>(c.bytes_written);
  const bool library_gemm = c.m > 0 && c.n > 0 && c.k > 0;
  const bool copy = c.kernel.rfind("cudaMem", 0) == 0;
  double compute = 0;
  if (library_gemm) {
    row.kind = KernelClass::gemm;
    const GemmCurve& curve = device.curve(c.tensor_flops > 0 ? DType::bf16 : DType::f32);
    const double flops = static_cast<double>(c.tensor_flops + c.other_flops);
    compute = flops / (curve.peak_flops * gemm_efficiency(curve, c.m, c.n, c.k));
    row.memory_s = bytes / device.memory_bandwidth;
    row.overhead_s = launch_overhead(c, device.gemm_overhead_s, device);
  } else {
    if (c.tensor_flops > 0) {
      row.kind = KernelClass::attention;
      compute +=
          c.tensor_flops / (device.curve(DType::bf16).peak_flops * attention_efficiency(device, c));
    }
    if (c.other_flops > 0) {
      if (c.tensor_flops == 0) row.kind = KernelClass::cuda_core;
      const GemmCurve& fp32 = device.curve(DType::f32);
      compute += c.other_flops / (fp32.peak_flops * fp32.max_efficiency);
    }
    if (c.tensor_flops == 0 && c.other_flops == 0)
      row.kind = copy ? KernelClass::copy : KernelClass::memory;
    row.memory_s = bytes / (device.memory_bandwidth * device.elementwise_efficiency);
    row.overhead_s = launch_overhead(c, device.kernel_overhead_s, device);
  }
  row.compute_s = compute;
  return row;
}

}  // namespace

Roofline price_kernels(const Device& device, const std::vector<DeviceKernelCount>& counts) {
  Roofline r;
  for (const DeviceKernelCount& c : counts) {
    r.rows.push_back(price(device, c));
    const RooflineRow& row = r.rows.back();
    r.launches += c.launches;
    r.graph_launches += c.graph_launches;
    r.tensor_flops += c.tensor_flops;
    r.other_flops += c.other_flops;
    r.bytes += c.bytes_read + c.bytes_written;
    r.undeclared += c.undeclared;
    r.seconds += row.seconds();
    r.overhead_s += row.overhead_s;
    r.flops_only_s += row.compute_s;
    r.flops_only_attention_at_gemm_s += row.compute_s;
    if (row.kind == KernelClass::attention) {
      const GemmCurve& bf16 = device.curve(DType::bf16);
      r.flops_only_attention_at_gemm_s +=
          c.tensor_flops / (bf16.peak_flops * bf16.max_efficiency) -
          c.tensor_flops / (bf16.peak_flops * attention_efficiency(device, c));
    }
  }
  std::stable_sort(r.rows.begin(), r.rows.end(), [](const RooflineRow& a, const RooflineRow& b) {
    return a.seconds() > b.seconds();
  });
  return r;
}

}  // namespace boostlm::plan
