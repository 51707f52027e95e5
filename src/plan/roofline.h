// A step's kernels as the emulated CUDA device counted them (kernels/backend.h's DeviceKernelCount,
// issue 47), priced on a device described as data (plan/hardware.h): each kernel at the slower of
// its FLOPs at the rate its kind reaches and its bytes at the memory bandwidth, plus the device's
// per-launch overhead. A prediction, not a measurement: scripts/device-check.sh measures it on a
// GPU.
//   library GEMM (m, n, k known)  its curve's rate at that shape (plan/cost.h's gemm_efficiency),
//                                 bf16 when on the tensor cores, fp32 otherwise
//   attention on the tensor cores the bf16 peak · attention_max_efficiency · hd/(hd + half)
//   other matrix products         the fp32 peak · its max efficiency (CUDA cores)
//   everything else               bytes / (bandwidth · elementwise_efficiency)
#pragma once

#include <string>
#include <vector>

#include "kernels/backend.h"
#include "plan/hardware.h"

namespace boostlm::plan {

enum class KernelClass { gemm, attention, cuda_core, memory, copy };
const char* to_string(KernelClass kind);

struct RooflineRow {
  DeviceKernelCount count;
  KernelClass kind = KernelClass::memory;
  double compute_s = 0, memory_s = 0, overhead_s = 0;
  double seconds() const;  // max(compute, memory) + overhead
  bool memory_bound() const { return memory_s > compute_s; }
};

struct Roofline {
  std::vector<RooflineRow> rows;  // the slowest first
  uint64_t launches = 0, tensor_flops = 0, other_flops = 0, bytes = 0, undeclared = 0;
  uint64_t graph_launches = 0;  // of the launches, graph nodes (the rest from the host)
  double seconds = 0, overhead_s = 0;
  // Ceilings of the design, for the table of where the time goes: the step if every kernel took
  // only its FLOPs' time (each byte free, no launch overhead), and the same with attention's
  // tensor-core FLOPs also at the bf16 GEMM curve's best efficiency (what a fused attention at
  // cuBLAS's rate would reach).
  double flops_only_s = 0, flops_only_attention_at_gemm_s = 0;
  double tensor_share() const;  // of the matrix-product FLOPs, those on the tensor cores
};

Roofline price_kernels(const Device& device, const std::vector<DeviceKernelCount>& counts);

}  // namespace boostlm::plan
