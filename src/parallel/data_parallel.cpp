#include "parallel/data_parallel.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "kernels/adamw.h"

namespace boostlm {

namespace {
// Backward stage after which a parameter's gradient is final: 0 for the head and final norm,
// n_layers − l for block l, n_layers + 1 for the embedding (its gradient comes last, and also
// from the head when tied).
int64_t ready_stage(const std::string& name, int64_t n_layers) {
  const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) == 0) return n_layers - std::stoll(name.substr(prefix.size()));
  if (name == "model.embed_tokens.weight") return n_layers + 1;
  return 0;
}
}  // namespace

GradReducer::GradReducer(const ParamTable& table, int64_t n_layers, FlatBuffer& grads,
                         Communicator& dp, int64_t bucket_bytes)
    : grads_(grads), dp_(dp), n_layers_(n_layers) {
  const auto& entries = table.entries();
  const int64_t bucket_elements = std::max<int64_t>(1, bucket_bytes / 4);
  Bucket current;
  bool open = false;
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    const int64_t stage = ready_stage(it->name, n_layers);
    if (!open) {
      current = Bucket{it->offset, it->offset + it->numel, stage, false};
      open = true;
    } else {
      current.begin = it->offset;  // entries are laid out in order: extend downwards
      current.stage = std::max(current.stage, stage);
    }
    if (current.end - current.begin >= bucket_elements) {
      buckets_.push_back(current);
      open = false;
    }
  }
  if (open) buckets_.push_back(current);
}

void GradReducer::poll() {
  for (auto& r : requests_) r.test();
}

void GradReducer::reached(int64_t stage) {
  poll();
  for (auto& b : buckets_) {
    if (b.started || b.stage > stage) continue;
    requests_.push_back(dp_.iall_reduce(grads_.data() + b.begin, b.end - b.begin));
    b.started = true;
  }
}

void GradReducer::head_done() {
  reached(0);
}
void GradReducer::block_done(int64_t layer) {
  reached(n_layers_ - layer);
}

void GradReducer::finish() {
  reached(n_layers_ + 1);
  for (auto& r : requests_) r.wait();
  requests_.clear();
  for (auto& b : buckets_) b.started = false;
  if (dp_.size() > 1) scale_inplace(grads_.data(), grads_.size(), 1.0f / dp_.size());
}

}  // namespace boostlm
