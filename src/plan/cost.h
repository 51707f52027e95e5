// Seconds for each kind of work on a device or link (the curves of plan/hardware.h).
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "core/dtype.h"
#include "plan/hardware.h"
#include "plan/workload.h"

namespace boostlm::plan {

// g(m)·g(n)·g(k) · max_efficiency: the share of peak a GEMM of this shape reaches.
double gemm_efficiency(const GemmCurve& curve, int64_t m, int64_t n, int64_t k);
// One launch's overhead: `per_launch` from the host, or, `graphed` (replayed as a node of a CUDA
// graph, as the engine runs a GPU's step where StepConfig allows), the device's per-node overhead
// where that is known and smaller (Device::graph_node_overhead_s; 0 counts as unknown).
double launch_seconds(const Device& device, double per_launch, bool graphed);
// max(FLOPs at the curve's rate, operands and result through memory) + the call overhead.
double gemm_seconds(const Device& device, DType dtype, const GemmWork& gemm, bool graphed = false);
double elementwise_seconds(const Device& device, double elements, int64_t kernels,
                           double element_bytes, bool graphed = false);
double attention_seconds(const Device& device, DType dtype, const Work& work, int64_t head_dim,
                         double element_bytes, bool graphed = false);

// Bytes on the wire per counted byte of a ring collective over `group` ranks: 2(t−1)/t for an
// all-reduce (reduce-scatter then all-gather), (t−1)/t for a reduce-scatter of the whole buffer,
// (t−1) for an all-gather (counted per rank), 1 for point-to-point and broadcast.
double ring_factor(Collective kind, int group);
// α per call + ring_factor · bytes / (bandwidth · efficiency / flows), where `flows` devices share
// a per-node link (1 for a per-device link); on a measured link (Link::measured) each call costs
// what the measurement gives for the calls' mean size on the wire.
double collective_seconds(const Link& link, Collective kind, int64_t calls, double bytes, int group,
                          int flows = 1);
// Bytes on the wire per rank for all kinds of `counts` (ring factors applied) at `element_bytes`
// per element.
double wire_bytes(const CommCounts& counts, int group, double element_bytes);
// All kinds of `counts` (as the engine counts them, 4 bytes per element) sent at
// `element_bytes` per element.
double comm_seconds(const Link& link, const CommCounts& counts, int group, double element_bytes,
                    int flows = 1);

// The parts of a Work: GEMMs, attention, element-wise, TP communication.
struct WorkSeconds {
  double gemm = 0, attention = 0, elementwise = 0, comm = 0;
  double compute() const { return gemm + attention + elementwise; }
  double total() const { return compute() + comm; }
  WorkSeconds& operator+=(const WorkSeconds& o);
  WorkSeconds operator*(double s) const;
  WorkSeconds operator+(const WorkSeconds& o) const { return WorkSeconds(*this) += o; }
};

struct CostContext {
  const Device* device = nullptr;
  DType dtype = DType::bf16;      // GEMM inputs
  DType attention_dtype = dtype;  // the CPU backend runs attention in fp32 whatever the GEMMs do
  double activation_bytes = 2;    // per activation element in element-wise passes
  double residual_bytes = 2;      // per residual-stream element in them (Work::residual_elements)
  double comm_bytes = 2;          // per communicated activation element
  const Link* tp_link = nullptr;
  int tp = 1;
  int tp_flows = 1;
  bool graphed = false;  // the work is replayed from CUDA graphs (launch_seconds)
};

WorkSeconds work_seconds(const CostContext& ctx, const Work& work, int64_t head_dim);

}  // namespace boostlm::plan
