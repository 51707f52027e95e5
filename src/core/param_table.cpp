#include "core/param_table.h"

#include <cstring>
#include <numeric>

#include "core/device.h"
#include "core/error.h"
#include "core/rng.h"

namespace boostlm {

namespace {
constexpr int64_t kAlignElements = 16;  // 64 bytes: every view starts on a cache line

int64_t product(const std::vector<int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}
}  // namespace

int64_t ParamInfo::full_numel() const {
  return product(shape);
}

const ParamInfo& ParamTable::add(std::string name, std::vector<int64_t> shape, Init init,
                                 float init_std, bool weight_decay, int shard_axis,
                                 int64_t shard_begin, int64_t shard_size) {
  BOOSTLM_ASSERT_MSG(!index_.count(name), "duplicate parameter " + name);
  ParamInfo info;
  info.name = std::move(name);
  info.shape = shape;
  info.local_shape = shape;
  if (shard_axis >= 0) {
    BOOSTLM_ASSERT(shard_axis < static_cast<int>(shape.size()));
    BOOSTLM_ASSERT(shard_begin >= 0 && shard_size > 0 &&
                   shard_begin + shard_size <= shape[shard_axis]);
    info.shard_axis = shard_axis;
    info.shard_begin = shard_begin;
    info.local_shape[shard_axis] = shard_size;
  }
  info.numel = product(info.local_shape);
  info.offset = total_;
  info.init = init;
  info.init_std = init_std;
  info.weight_decay = weight_decay;
  total_ += (info.numel + kAlignElements - 1) / kAlignElements * kAlignElements;
  index_[info.name] = entries_.size();
  entries_.push_back(std::move(info));
  return entries_.back();
}

const ParamInfo* ParamTable::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &entries_[it->second];
}

const ParamInfo& ParamTable::at(std::string_view name) const {
  const ParamInfo* info = find(name);
  BOOSTLM_ASSERT_MSG(info, "no parameter named " + std::string(name));
  return *info;
}

int64_t ParamTable::parameter_count() const {
  int64_t count = 0;
  for (const auto& e : entries_) count += e.numel;
  return count;
}

void FlatBuffer::zero() {
  device_zero(data_.data(), data_.size() * sizeof(float));
}

void init_parameters(const ParamTable& table, FlatBuffer& weights, uint64_t seed) {
  // A named copy: the values are drawn on the host (per-name RNG streams, identical whatever the
  // device) and uploaded.
  HostView<float> host(weights.data(), weights.size(), HostAccess::write,
                       "parameter initialisation");
  for (const auto& p : table.entries()) {
    float* out = host.data() + p.offset;
    switch (p.init) {
      case Init::ones:
        std::fill(out, out + p.numel, 1.0f);
        break;
      case Init::zeros:
        std::fill(out, out + p.numel, 0.0f);
        break;
      case Init::normal:
      case Init::uniform: {
        // View the tensor as [rows, cols] with cols = last dim; a shard along axis 0 is a row
        // range, a shard along the last axis a column range.
        const int64_t full_cols = p.shape.back();
        const int64_t full_rows = p.full_numel() / full_cols;
        int64_t row_begin = 0, rows = full_rows, col_begin = 0, cols = full_cols;
        if (p.shard_axis == static_cast<int>(p.shape.size()) - 1 && p.shape.size() > 1) {
          col_begin = p.shard_begin;
          cols = p.local_shape.back();
        } else if (p.shard_axis == 0) {
          row_begin = p.shard_begin;
          rows = p.local_shape[0];
          if (p.shape.size() == 1) {  // a 1-D shard is a column range of a single row
            row_begin = 0, rows = 1, col_begin = p.shard_begin, cols = p.local_shape[0];
          }
        } else {
          BOOSTLM_ASSERT_MSG(p.shard_axis < 0, "unsupported shard axis for " + p.name);
        }
        if (p.init == Init::uniform)
          fill_uniform_slice(out, seed, p.name, p.init_std, full_cols, row_begin, rows, col_begin,
                             cols);
        else
          fill_normal_slice(out, seed, p.name, p.init_std, full_cols, row_begin, rows, col_begin,
                            cols);
        break;
      }
    }
  }
  host.upload();
}

}  // namespace boostlm
