// Data parallelism: the gradient all-reduce over the DP group, in buckets started during backward.
//
// The flat gradient buffer is cut into buckets of about `bucket_bytes`, walking the parameters
// from the last (LM head) to the first (embedding), the order in which backward finishes them.
// As the model reports progress (head done, block l done) every bucket whose parameters are all
// final starts a non-blocking all-reduce; each later report also polls the requests in flight so
// MPI progresses them while backward computes. finish() starts the rest, waits, and averages.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/buffer.h"
#include "core/param_table.h"
#include "engine/model.h"

namespace boostlm {

class GradReducer final : public BackwardObserver {
 public:
  GradReducer(const ParamTable& table, int64_t n_layers, FlatBuffer& grads, Communicator& dp,
              int64_t bucket_bytes = int64_t{16} << 20);

  void head_done() override;
  void block_done(int64_t layer) override;
  // Starts the buckets not started yet, waits for all, and divides by the DP size.
  void finish();
  void backward_done() override { finish(); }
  // Over NCCL the buckets' all-reduces are stream work (on the DP group's side stream, forked
  // from the backward they follow and joined back in finish): a graph captures them with that
  // backward; over MPI or the staged transport the host waits on them.
  bool capturable() const override { return dp_.capturable(); }

  int64_t buckets() const { return static_cast<int64_t>(buckets_.size()); }

 private:
  struct Bucket {
    int64_t begin = 0, end = 0;  // element range of the flat buffer
    int64_t stage = 0;           // ready once backward has finished this stage
    bool started = false;
  };
  void reached(int64_t stage);
  void poll();

  FlatBuffer& grads_;
  Communicator& dp_;
  int64_t n_layers_;
  std::vector<Bucket> buckets_;
  std::vector<CommRequest> requests_;
};

// ZeRO stage 1 (SPEC §3.7): the optimizer state is partitioned over the DP group. Rank i owns the
// flat range [i·part, (i+1)·part) of the gradient/weight buffers (part = ⌈size / dp⌉, the last
// range shorter): gradients are reduce-scattered (each rank receives the DP-mean of its range),
// the rank updates its range only, and the weights are all-gathered back.
// Per step over DP: one reduce-scatter of the whole buffer, one all-gather of `part` per rank.
class ZeroStage1 {
 public:
  ZeroStage1(int64_t elements, Communicator& dp);

  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }

  // grads[begin, end) := mean over the DP group of grads[begin, end) (the rest is left stale).
  void reduce_scatter(FlatBuffer& grads);
  // Every rank's range of `buffer` to every rank.
  void all_gather(FlatBuffer& buffer);
  // full (the whole flat buffer) from each rank's `range` buffer (end − begin elements).
  void all_gather_range(const FlatBuffer& range, FlatBuffer& full);
  // range := full[begin, end).
  void take_range(const FlatBuffer& full, FlatBuffer& range) const;

 private:
  Communicator& dp_;
  int64_t elements_, part_, begin_, end_;
  std::vector<int64_t> counts_;
  Buffer<float> scratch_;
};

}  // namespace boostlm
