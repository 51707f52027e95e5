// The parameter table: names, shapes and offsets of every parameter in ONE flat buffer.
//
// Parameters, gradients and each optimizer moment are each a single FlatBuffer laid out by the same
// table, so the optimizer, gradient reduction and checkpointing are loops over one range, and a
// named view is just `buffer.data() + info.offset` (llm.c, Megatron's grad buffers).
// A table entry also records which slice of the full tensor this process holds, so parallel layouts
// can shard a tensor while the names and full shapes stay those of SPEC §2.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/buffer.h"

namespace boostlm {

// normal: N(0, init_std²); uniform: U(−init_std, init_std) (init_std is then the bound).
enum class Init { normal, ones, zeros, uniform };

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;        // full tensor shape (SPEC §2), row-major
  std::vector<int64_t> local_shape;  // the part this process holds
  int shard_axis = -1;               // -1: not sharded
  int64_t shard_begin = 0;           // first index along shard_axis held here
  int64_t offset = 0;                // in elements, within the flat buffer
  int64_t numel = 0;                 // local element count
  Init init = Init::normal;
  float init_std = 0.0f;
  bool weight_decay = true;

  int64_t full_numel() const;
};

class ParamTable {
 public:
  // Adds a whole (unsharded) tensor, or its slice [shard_begin, shard_begin + local) along axis.
  const ParamInfo& add(std::string name, std::vector<int64_t> shape, Init init, float init_std,
                       bool weight_decay, int shard_axis = -1, int64_t shard_begin = 0,
                       int64_t shard_size = 0);
  const ParamInfo& at(std::string_view name) const;  // asserts that it exists
  const ParamInfo* find(std::string_view name) const;
  const std::vector<ParamInfo>& entries() const { return entries_; }
  int64_t total_elements() const { return total_; }  // including alignment padding
  int64_t parameter_count() const;                   // local, without padding

 private:
  std::vector<ParamInfo> entries_;
  std::unordered_map<std::string, size_t> index_;
  int64_t total_ = 0;
};

// The flat float buffer a ParamTable lays out (weights, gradients, a moment): a Buffer (64-byte
// aligned, zero-initialised, core/buffer.h's allocator) with named views.
class FlatBuffer {
 public:
  FlatBuffer() = default;
  explicit FlatBuffer(int64_t size) : data_(static_cast<size_t>(size)) {}
  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  int64_t size() const { return static_cast<int64_t>(data_.size()); }
  float* view(const ParamInfo& info) { return data_.data() + info.offset; }
  const float* view(const ParamInfo& info) const { return data_.data() + info.offset; }
  void zero();

 private:
  Buffer<float> data_;
};

// Fills every parameter from (seed, full name): the local slice of the full tensor's values.
void init_parameters(const ParamTable& table, FlatBuffer& weights, uint64_t seed);

}  // namespace boostlm
