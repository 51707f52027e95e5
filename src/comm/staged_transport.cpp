#include "comm/staged_transport.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <numeric>
#include <utility>

#include "core/error.h"

namespace boostlm {

// Buffers kept for reuse at most: a step's collectives reuse a few sizes, and a pinned allocation
// costs far more than a collective of the same size.
constexpr size_t kPooledBuffers = 8;

// A non-blocking MPI operation on a staging buffer: finishing it copies a result back to the
// device (when `copy_back` is set) and returns the buffer to the pool.
class StagedCompletion final : public DeviceCompletion {
 public:
  using Staging = StagedTransport::Staging;
  StagedCompletion(StagedTransport& transport, Staging staging, CommRequest request,
                   void* copy_back, int64_t bytes)
      : transport_(transport),
        staging_(std::move(staging)),
        request_(std::move(request)),
        copy_back_(copy_back),
        bytes_(bytes) {}
  // While an exception unwinds, the peers may never come (as in ~CommRequest): the buffer MPI may
  // still write into is left alive rather than waited for.
  ~StagedCompletion() override {
    if (finished_) return;
    if (std::uncaught_exceptions() > 0) {
      new Staging(std::move(staging_));  // deliberately leaked
      return;
    }
    wait();
  }
  bool ready() override {
    if (finished_) return true;
    if (!request_.test()) return false;
    finish();
    return true;
  }
  void wait() override {
    if (finished_) return;
    request_.wait();
    finish();
  }

 private:
  void finish() {
    finished_ = true;
    if (copy_back_) transport_.copier_->to_device(copy_back_, staging_.memory.get(), bytes_);
    transport_.release(std::move(staging_));
  }
  StagedTransport& transport_;
  Staging staging_;
  CommRequest request_;
  void* copy_back_;
  int64_t bytes_;
  bool finished_ = false;
};

StagedTransport::StagedTransport(Communicator host_group, std::unique_ptr<StagingCopier> copier)
    : host_(std::move(host_group)), copier_(std::move(copier)) {
  BOOSTLM_ASSERT_MSG(copier_ != nullptr, "StagedTransport: no copier");
}

StagedTransport::Staging StagedTransport::acquire(int64_t bytes) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(pool_.size()); ++i)
    if (pool_[i].bytes >= bytes && (best < 0 || pool_[i].bytes < pool_[best].bytes)) best = i;
  if (best < 0) return Staging{copier_->host_buffer(bytes), bytes};
  Staging staging = std::move(pool_[best]);
  pool_.erase(pool_.begin() + best);
  return staging;
}

void StagedTransport::release(Staging staging) {
  if (pool_.size() < kPooledBuffers) pool_.push_back(std::move(staging));
}

int64_t StagedTransport::pooled_bytes() const {
  int64_t total = 0;
  for (const Staging& staging : pool_) total += staging.bytes;
  return total;
}

DeviceTransport::Started StagedTransport::all_reduce(void* data, int64_t count, ElementType type,
                                                     ReduceOp op) {
  const int64_t bytes = count * element_bytes(type);
  Staging staging = acquire(bytes);
  copier_->to_host(staging.memory.get(), data, bytes);
  if (type == ElementType::f32 && op == ReduceOp::sum) {
    CommRequest request = host_.iall_reduce(staging.floats(), count);
    return std::make_unique<StagedCompletion>(*this, std::move(staging), std::move(request), data,
                                              bytes);
  }
  if (type == ElementType::f64) {
    BOOSTLM_ASSERT_MSG(op == ReduceOp::sum, "staged all_reduce: max of doubles is not offered");
    host_.all_reduce(static_cast<double*>(staging.memory.get()), count);
  } else if (type == ElementType::bf16) {
    BOOSTLM_ASSERT_MSG(op == ReduceOp::sum, "staged all_reduce: max of bf16 is not offered");
    host_.all_reduce(static_cast<bf16_t*>(staging.memory.get()), count);
  } else {
    host_.all_reduce_max(staging.floats(), count);
  }
  copier_->to_device(data, staging.memory.get(), bytes);
  release(std::move(staging));
  return nullptr;
}

// The split message's values and statistics, each summed on the host (bf16_sum.h's operators).
DeviceTransport::Started StagedTransport::all_reduce_rows(void* buffer, const RowMessage& m) {
  Staging staging = acquire(m.bytes);
  copier_->to_host(staging.memory.get(), buffer, m.bytes);
  host_.all_reduce(m.values_in(staging.memory.get()), m.rows * m.values);
  if (m.stats > 0) host_.all_reduce(m.stats_in(staging.memory.get()), m.rows * m.stats);
  copier_->to_device(buffer, staging.memory.get(), m.bytes);
  release(std::move(staging));
  return nullptr;
}

// `send` may be this rank's slot of `recv`: it is staged into that slot either way.
DeviceTransport::Started StagedTransport::all_gather(const float* send, int64_t count,
                                                     float* recv) {
  const int64_t slot = static_cast<int64_t>(host_.rank()) * count;
  Staging staging = acquire(host_.size() * count * 4);
  copier_->to_host(staging.floats() + slot, send, count * 4);
  host_.all_gather(staging.floats() + slot, count, staging.floats());
  copier_->to_device(recv, staging.memory.get(), host_.size() * count * 4);
  release(std::move(staging));
  return nullptr;
}

DeviceTransport::Started StagedTransport::reduce_scatter(const float* send, float* recv,
                                                         const std::vector<int64_t>& counts) {
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const int64_t mine = counts[host_.rank()];
  Staging staging = acquire((total + mine) * 4);
  float* host_send = staging.floats();
  float* host_recv = host_send + total;
  copier_->to_host(host_send, send, total * 4);
  host_.reduce_scatter(host_send, host_recv, counts);
  copier_->to_device(recv, host_recv, mine * 4);
  release(std::move(staging));
  return nullptr;
}

DeviceTransport::Started StagedTransport::broadcast(float* data, int64_t count, int root) {
  Staging staging = acquire(count * 4);
  if (host_.rank() == root) copier_->to_host(staging.memory.get(), data, count * 4);
  host_.broadcast(staging.floats(), count, root);
  if (host_.rank() != root) copier_->to_device(data, staging.memory.get(), count * 4);
  release(std::move(staging));
  return nullptr;
}

DeviceTransport::Started StagedTransport::send(const void* data, int64_t count, ElementType type,
                                               int peer, int tag) {
  const int64_t bytes = count * element_bytes(type);
  Staging staging = acquire(bytes);
  copier_->to_host(staging.memory.get(), data, bytes);
  CommRequest request =
      type == ElementType::bf16
          ? host_.isend(static_cast<const bf16_t*>(staging.memory.get()), count, peer, tag)
          : host_.isend(staging.floats(), count, peer, tag);
  return std::make_unique<StagedCompletion>(*this, std::move(staging), std::move(request), nullptr,
                                            0);
}

DeviceTransport::Started StagedTransport::recv(void* data, int64_t count, ElementType type,
                                               int peer, int tag) {
  const int64_t bytes = count * element_bytes(type);
  Staging staging = acquire(bytes);
  CommRequest request =
      type == ElementType::bf16
          ? host_.irecv(static_cast<bf16_t*>(staging.memory.get()), count, peer, tag)
          : host_.irecv(staging.floats(), count, peer, tag);
  return std::make_unique<StagedCompletion>(*this, std::move(staging), std::move(request), data,
                                            bytes);
}

std::shared_ptr<void> HostCopier::host_buffer(int64_t bytes) {
  void* memory = std::malloc(bytes > 0 ? bytes : 1);
  BOOSTLM_ASSERT_MSG(memory != nullptr, "HostCopier: out of memory");
  return std::shared_ptr<void>(memory, std::free);
}

void HostCopier::to_host(void* host, const void* device, int64_t bytes) {
  if (bytes > 0 && host != device) std::memmove(host, device, bytes);
}

void HostCopier::to_device(void* device, const void* host, int64_t bytes) {
  if (bytes > 0 && host != device) std::memmove(device, host, bytes);
}

}  // namespace boostlm
