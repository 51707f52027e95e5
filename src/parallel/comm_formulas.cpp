#include "parallel/comm_formulas.h"

namespace boostlm {

namespace {
constexpr int64_t kFloat = sizeof(float);

void add(CommCounts& c, Collective kind, int64_t calls, int64_t elements) {
  c[kind].calls += calls;
  c[kind].bytes += elements * kFloat;
}

CommCounts& operator+=(CommCounts& a, const CommCounts& b) {
  for (int k = 0; k < kCollectiveKinds; ++k) {
    a.by_kind[k].calls += b.by_kind[k].calls;
    a.by_kind[k].bytes += b.by_kind[k].bytes;
  }
  return a;
}
}  // namespace

CommCounts block_tp_comm(LayoutKind layout, const ModelConfig& c, int64_t N, int tp, bool backward,
                         const BlockOptions& o) {
  CommCounts out;
  if (tp == 1) return out;
  const int64_t d = c.d_model, kv = c.kv_dim(), ff = c.d_ff;
  switch (layout) {
    case LayoutKind::dense_tp:
      add(out, Collective::all_reduce, 2, 2 * N * d);
      break;
    case LayoutKind::naive_tp:
      if (!backward)
        add(out, Collective::all_reduce, o.grouping ? 4 : 7, N * (3 * d + 2 * kv + 2 * ff));
      else
        add(out, Collective::all_reduce, 4, N * (3 * d + ff));
      break;
    case LayoutKind::btp: {
      const int64_t calls = o.grouping ? 4 : 7;
      const int64_t stats = o.online_norm && !backward ? 2 : 0;  // Σx² riding with q and gate
      add(out, Collective::all_reduce, calls, N * (4 * c.attn_rank + 3 * c.mlp_rank + stats));
      if (!o.online_norm) add(out, Collective::all_reduce, 2, 2 * N);  // synchronous statistics
      break;
    }
  }
  return out;
}

CommCounts outer_tp_comm(LayoutKind layout, const ModelConfig& c, int64_t N, int tp, int64_t chunks,
                         bool backward) {
  CommCounts out;
  if (tp == 1) return out;
  const int64_t d = c.d_model;
  add(out, Collective::all_reduce, 1, N * d);       // embedding
  add(out, Collective::all_reduce_max, chunks, N);  // loss: row max
  add(out, Collective::all_reduce, chunks, 2 * N);  // loss: Σexp and target logit
  if (layout == LayoutKind::btp) add(out, Collective::all_gather, 1, N * d / tp);  // final norm
  if (backward) {
    add(out, Collective::all_reduce, chunks, N * d);  // head input gradient
    if (layout == LayoutKind::btp) add(out, Collective::all_gather, 1, N * d / tp);  // embedding
  }
  return out;
}

CommCounts step_tp_comm(LayoutKind layout, const ModelConfig& c, int64_t N, int tp, int64_t chunks,
                        bool backward, const BlockOptions& o) {
  CommCounts out = outer_tp_comm(layout, c, N, tp, chunks, backward);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    out += block_tp_comm(layout, c, N, tp, false, o);
    if (!backward) continue;
    out += block_tp_comm(layout, c, N, tp, true, o);
    if (o.recompute == Recompute::block && l + 1 < c.n_layers)
      out += block_tp_comm(layout, c, N, tp, false, o);  // the rerun forward
  }
  return out;
}

CommCounts pipeline_p2p_comm(LayoutKind layout, const ModelConfig& c, int64_t N, int tp, int pp,
                             int stage, int64_t m, bool backward) {
  CommCounts out;
  const int64_t boundary = N * (layout == LayoutKind::btp ? c.d_model / tp : c.d_model);
  const bool has_next = stage + 1 < pp, has_prev = stage > 0;
  // Activations go forward: sent to the next stage, received from the previous one.
  if (has_next) add(out, Collective::send, m, m * boundary);
  if (has_prev) add(out, Collective::recv, m, m * boundary);
  if (backward) {  // their gradients come back
    if (has_prev) add(out, Collective::send, m, m * boundary);
    if (has_next) add(out, Collective::recv, m, m * boundary);
  }
  return out;
}

}  // namespace boostlm
