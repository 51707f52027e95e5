// A cluster described as data (hardware/*.json): what one device computes and moves, and what the
// links between devices carry. The performance model (plan/step_model.h) reads nothing else about
// the machine, so a new cluster is a new file, and `boostlm calibrate` writes this machine's.
//
// Every number is a rate or a latency with its unit in the name. The efficiency curves:
//   GEMM C[m,n] = A[m,k]·B[k,n]:  rate = peak · max_efficiency · g(m)·g(n)·g(k),  g(x) = x/(x + h)
//     (h = half_dim: a dimension of h runs at half speed; thin GEMMs lose to tile and wave
//     quantisation), and never faster than the memory roofline; plus a per-call overhead.
//   attention (fused, FlashAttention-style): rate = peak · max_efficiency · hd/(hd +
//   half_head_dim),
//     and never faster than its memory traffic.
//   element-wise work: bytes / (memory bandwidth · efficiency) + a per-kernel overhead.
//   a collective over a link class: α + factor · bytes / (bandwidth · efficiency).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/dtype.h"

namespace boostlm::plan {

struct GemmCurve {
  double peak_flops = 0;  // FLOP/s
  double max_efficiency = 1;
  double half_dim = 0;
};

// Products of the forward's size in FlashAttention-2's fused attention backward (against the
// forward's 2): the count a Work's attention FLOPs are in (plan/workload.h).
inline constexpr double kFusedAttentionBackwardProducts = 5;

struct Device {
  double memory_bytes = 0;
  std::map<DType, GemmCurve> gemm;  // per input precision
  double gemm_overhead_s = 0;       // per GEMM call
  double memory_bandwidth = 0;      // bytes/s (HBM, or DRAM for a CPU)
  double elementwise_efficiency = 1;
  double kernel_overhead_s = 0;  // per element-wise kernel
  // Per kernel or copy launched as a node of a CUDA graph instead of from the host (the file's
  // graph_node_overhead_us; absent: kernel_overhead_s, no gain assumed; 0 in a Device built by
  // hand counts as unknown, plan/cost.h's launch_seconds).
  double graph_node_overhead_s = 0;
  double attention_max_efficiency = 1;
  double attention_half_head_dim = 0;
  // Products of the forward's size in the engine's attention backward on this device: 5 in one
  // fused pass (FlashAttention-2's count; the CPU backend's); 7 for the CUDA backend's kernels,
  // dK/dV and then dQ each recomputing S and dP (deterministic, no atomics).
  double attention_backward_products = kFusedAttentionBackwardProducts;

  const GemmCurve& curve(DType dtype) const;  // throws Error when the file has no such curve
};

struct Link {
  double alpha_s = 0;    // latency of one collective call
  double bandwidth = 0;  // bytes/s each way per device (per node when shared_by_node)
  double efficiency = 1;
  bool shared_by_node = false;  // one NIC budget for all the node's devices talking at once
  // A measured link (boostlm calibrate): seconds per call against bytes on the wire per call
  // (ring-scaled), ascending in bytes. When present it prices a call of any size (log-log
  // between the points, in proportion past the last); α and bandwidth stay as its summary. A
  // link's rate depends on the message size (slow start, eager and rendezvous protocols, a
  // shaper's bucket), which one α–β fitted over all sizes misses at the sizes a step sends.
  std::vector<std::pair<double, double>> measured;
  double call_seconds(double wire_bytes) const;  // one call of that many bytes on the wire
  // What a transfer in flight costs the computation beside it, per byte on the wire: 0 where the
  // network moves data without the compute's cores (NVLink, RDMA); on TCP over the compute cores
  // (the emulated hosts) the kernel's copies and the polling for progress. --tp-overlap pays it
  // for what it hides; a blocking collective's transfer runs while the compute waits anyway.
  double overlap_cost_s_per_byte = 0;
};

struct Hardware {
  std::string name, description;
  std::vector<std::string> sources;  // where the numbers come from
  int devices_per_node = 1;
  Device device;
  // A rank alone on its node (CPU machines): it runs on all the node's cores.
  std::optional<Device> solo_device;
  Link intra_node, inter_node;
  // How the engine runs on these devices. activations_fp32: element-wise passes and collectives
  // over fp32 activations even when the GEMMs run in bf16 (bf16 training rounds their operands), as
  // both of the engine's backends do; false models an engine keeping activations in the compute
  // precision. attention_fp32: attention computed in fp32 (the CPU backend's; the CUDA backend runs
  // bf16 attention on the tensor cores); absent from a file, it follows activations_fp32.
  bool activations_fp32 = false;
  bool attention_fp32 = false;
  // collectives_fp32: TP collectives and pipeline sends carry fp32 activations in bf16 training;
  // false where they carry bf16 (the engine since issue 60, the paper's). Absent from a file, it
  // follows activations_fp32.
  bool collectives_fp32 = false;

  static Hardware from_json(const nlohmann::json& json);  // throws Error naming the field
  nlohmann::json to_json() const;
};

// A name ("a100-80g") or a path to a JSON file. Names are looked up in $BOOSTLM_HARDWARE_DIR,
// ./hardware and the source tree's hardware/ directory.
Hardware load_hardware(const std::string& name_or_path);
std::string hardware_path(const std::string& name_or_path);  // throws Error when not found
// The directory `boostlm calibrate` writes to by default (the source tree's hardware/).
std::string default_hardware_dir();
std::vector<std::string> hardware_search_dirs();

}  // namespace boostlm::plan
