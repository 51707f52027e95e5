#include "engine/data_parallel.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "kernels/adamw.h"
#include "kernels/elementwise.h"

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
  dp_.join_device();  // the averaging below, and what follows, after the reductions
  for (auto& b : buckets_) b.started = false;
  if (dp_.size() > 1) scale_inplace(grads_.data(), grads_.size(), 1.0f / dp_.size());
}

ZeroStage1::ZeroStage1(int64_t elements, Communicator& dp)
    : dp_(dp), elements_(elements), part_((elements + dp.size() - 1) / dp.size()) {
  for (int r = 0; r < dp.size(); ++r)
    counts_.push_back(std::clamp<int64_t>(elements - r * part_, 0, part_));
  begin_ = std::min(elements, part_ * dp.rank());
  end_ = begin_ + counts_[dp.rank()];
}

void ZeroStage1::reduce_scatter(FlatBuffer& grads) {
  BOOSTLM_ASSERT(grads.size() == elements_);
  if (dp_.size() == 1) return;
  scratch_.resize(part_);
  dp_.reduce_scatter(grads.data(), scratch_.data(), counts_);
  scaled_copy(scratch_.data(), 1.0f / dp_.size(), grads.data() + begin_, end_ - begin_);
}

void ZeroStage1::all_gather(FlatBuffer& buffer) {
  if (dp_.size() == 1) return;
  Buffer<float> range(part_);  // equal contributions; the zero padding is dropped below
  copy_values(buffer.data() + begin_, end_ - begin_, range.data());
  scratch_.resize(part_ * dp_.size());
  dp_.all_gather(range.data(), part_, scratch_.data());
  copy_values(scratch_.data(), elements_, buffer.data());
}

void ZeroStage1::all_gather_range(const FlatBuffer& range, FlatBuffer& full) {
  BOOSTLM_ASSERT(range.size() == end_ - begin_ && full.size() == elements_);
  Buffer<float> padded(part_);  // zero padding, as in all_gather
  copy_values(range.data(), range.size(), padded.data());
  scratch_.resize(part_ * dp_.size());
  dp_.all_gather(padded.data(), part_, scratch_.data());
  copy_values(scratch_.data(), elements_, full.data());
}

void ZeroStage1::take_range(const FlatBuffer& full, FlatBuffer& range) const {
  copy_values(full.data() + begin_, end_ - begin_, range.data());
}

}  // namespace boostlm
