#include "plan/cost.h"

#include <algorithm>

namespace boostlm::plan {

namespace {

// x/(x + h): the share of a tile-sized dimension's speed a dimension of x keeps.
double saturation(double x, double half) {
  return half > 0 ? x / (x + half) : 1.0;
}

double input_bytes(DType dtype) {
  return dtype == DType::bf16 ? 2.0 : 4.0;
}

}  // namespace

double gemm_efficiency(const GemmCurve& c, int64_t m, int64_t n, int64_t k) {
  return c.max_efficiency * saturation(m, c.half_dim) * saturation(n, c.half_dim) *
         saturation(k, c.half_dim);
}

double launch_seconds(const Device& device, double per_launch, bool graphed) {
  return graphed && device.graph_node_overhead_s > 0
             ? std::min(per_launch, device.graph_node_overhead_s)
             : per_launch;
}

double gemm_seconds(const Device& device, DType dtype, const GemmWork& g, bool graphed) {
  if (g.m == 0 || g.n == 0 || g.k == 0) return 0;
  const GemmCurve& c = device.curve(dtype);
  const double compute = g.flops() / (c.peak_flops * gemm_efficiency(c, g.m, g.n, g.k));
  // Operands in the input precision, the result in fp32 (accumulated).
  const double bytes =
      (static_cast<double>(g.m) * g.k + static_cast<double>(g.k) * g.n) * input_bytes(dtype) +
      static_cast<double>(g.m) * g.n * 4.0;
  const double memory = bytes / device.memory_bandwidth;
  return std::max(compute, memory) +
         (g.own_call ? launch_seconds(device, device.gemm_overhead_s, graphed) : 0.0);
}

double elementwise_seconds(const Device& device, double elements, int64_t kernels,
                           double element_bytes, bool graphed) {
  return elements * element_bytes / (device.memory_bandwidth * device.elementwise_efficiency) +
         kernels * launch_seconds(device, device.kernel_overhead_s, graphed);
}

double attention_seconds(const Device& device, DType dtype, const Work& w, int64_t head_dim,
                         double element_bytes, bool graphed) {
  if (w.attention_calls == 0) return 0;
  const GemmCurve& c = device.curve(dtype);
  const double efficiency =
      device.attention_max_efficiency * saturation(head_dim, device.attention_half_head_dim);
  // A backward of more products than FlashAttention-2's costs them.
  const double more = device.attention_backward_products / kFusedAttentionBackwardProducts - 1.0;
  const double flops = w.attention_flops + w.attention_backward_flops * more;
  const double compute = flops / (c.peak_flops * efficiency);
  const double memory = w.attention_elements * element_bytes /
                        (device.memory_bandwidth * device.elementwise_efficiency);
  return std::max(compute, memory) +
         w.attention_calls * launch_seconds(device, device.kernel_overhead_s, graphed);
}

double ring_factor(Collective kind, int group) {
  const double t = group;
  switch (kind) {
    case Collective::all_reduce:
    case Collective::all_reduce_max:
      return 2.0 * (t - 1) / t;
    case Collective::reduce_scatter:
      return (t - 1) / t;
    case Collective::all_gather:
      return t - 1;
    case Collective::broadcast:
    case Collective::send:
    case Collective::recv:
      return 1.0;
  }
  return 1.0;
}

double collective_seconds(const Link& link, Collective kind, int64_t calls, double bytes, int group,
                          int flows) {
  if (calls == 0 || group < 2) return 0;
  // Each call at the step's mean size for its kind; `flows` devices sharing a per-node link
  // take as long as one sending all their bytes.
  const double share = link.shared_by_node ? flows : 1;
  const double wire = ring_factor(kind, group) * bytes / static_cast<double>(calls) * share;
  return static_cast<double>(calls) * link.call_seconds(wire);
}

double wire_bytes(const CommCounts& counts, int group, double element_bytes) {
  if (group < 2) return 0;
  double bytes = 0;
  for (int k = 0; k < kCollectiveKinds; ++k) {
    const auto kind = static_cast<Collective>(k);
    if (kind == Collective::recv) continue;  // the other end of a send
    bytes += ring_factor(kind, group) * counts[kind].bytes / 4.0 * element_bytes;
  }
  return bytes;
}

double comm_seconds(const Link& link, const CommCounts& counts, int group, double element_bytes,
                    int flows) {
  double s = 0;
  for (int k = 0; k < kCollectiveKinds; ++k) {
    const auto kind = static_cast<Collective>(k);
    // A receive is the other end of a send: the time is counted once, at the send.
    if (kind == Collective::recv) continue;
    const CollectiveCount& c = counts[kind];
    s += collective_seconds(link, kind, c.calls, c.bytes / 4.0 * element_bytes, group, flows);
  }
  return s;
}

WorkSeconds& WorkSeconds::operator+=(const WorkSeconds& o) {
  gemm += o.gemm;
  attention += o.attention;
  elementwise += o.elementwise;
  comm += o.comm;
  return *this;
}

WorkSeconds WorkSeconds::operator*(double s) const {
  return {gemm * s, attention * s, elementwise * s, comm * s};
}

WorkSeconds work_seconds(const CostContext& ctx, const Work& w, int64_t head_dim) {
  WorkSeconds s;
  for (const auto& g : w.gemms) s.gemm += gemm_seconds(*ctx.device, ctx.dtype, g, ctx.graphed);
  s.attention = attention_seconds(*ctx.device, ctx.attention_dtype, w, head_dim,
                                  ctx.activation_bytes, ctx.graphed);
  // The residual stream's passes at its own width, as activation-sized elements.
  const double elements =
      w.elementwise_elements -
      w.residual_elements * (1.0 - ctx.residual_bytes / ctx.activation_bytes);
  s.elementwise = elementwise_seconds(*ctx.device, elements, w.elementwise_kernels,
                                      ctx.activation_bytes, ctx.graphed);
  if (ctx.tp_link)
    s.comm = comm_seconds(*ctx.tp_link, w.tp, ctx.tp, ctx.comm_bytes, ctx.tp_flows);
  return s;
}

}  // namespace boostlm::plan
