#include "model/lax.h"

#include <cmath>
#include <tuple>

#include "core/error.h"

namespace boostlm {

std::vector<LaxTensor> lax_tensors(const ModelConfig& c, int64_t rank) {
  auto kaiming = [](int64_t fan_in) {  // nn.Linear's kaiming_uniform_(a = sqrt(5))
    return static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in)));
  };
  std::vector<LaxTensor> out;
  if (c.lax_gate == LaxGate::kron) {
    const auto [p, q] = kron_factors(rank);
    out.push_back({".lax_gate.kron_p", {p, p}, Init::uniform, kaiming(p), true, -1});
    out.push_back({".lax_gate.kron_q", {q, q}, Init::uniform, kaiming(q), true, -1});
  } else {
    out.push_back({".lax_gate.weight", {rank, rank}, Init::uniform, kaiming(rank), true, 1});
  }
  out.push_back({".lax_norm.weight", {rank}, Init::ones, 0, false, 0});
  out.push_back({".lax_norm.bias", {rank}, Init::zeros, 0, false, 0});
  return out;
}

LaxWeights bind_lax(const ModelConfig& c, const std::string& prefix, int64_t rank,
                    const ParamTable& table, const FlatBuffer& weights, FlatBuffer* grads) {
  auto grad = [&](const ParamInfo& info) { return grads ? grads->view(info) : nullptr; };
  LaxWeights w;
  w.rank = rank;
  const ParamInfo& nw = table.at(prefix + ".lax_norm.weight");
  const ParamInfo& nb = table.at(prefix + ".lax_norm.bias");
  w.r_local = nw.local_shape[0];
  w.r_begin = nw.shard_axis == 0 ? nw.shard_begin : 0;
  w.norm_weight = weights.view(nw);
  w.norm_bias = weights.view(nb);
  w.dnorm_weight = grad(nw);
  w.dnorm_bias = grad(nb);
  w.kron = c.lax_gate == LaxGate::kron;
  if (w.kron) {
    std::tie(w.p, w.q) = kron_factors(rank);
    const ParamInfo& kp = table.at(prefix + ".lax_gate.kron_p");
    const ParamInfo& kq = table.at(prefix + ".lax_gate.kron_q");
    BOOSTLM_ASSERT(kp.numel == w.p * w.p && kq.numel == w.q * w.q);
    w.kron_p = weights.view(kp);
    w.kron_q = weights.view(kq);
    w.dkron_p = grad(kp);
    w.dkron_q = grad(kq);
  } else {
    const ParamInfo& g = table.at(prefix + ".lax_gate.weight");
    BOOSTLM_ASSERT(g.local_shape[0] == rank && g.local_shape[1] == w.r_local);
    w.gate = weights.view(g);
    w.dgate = grad(g);
  }
  return w;
}

}  // namespace boostlm
