// Deterministic random numbers.
//
// Parameter initialisation is counter-based: element i of a tensor is a pure function of
// (seed, full parameter name, i). Any shard of a tensor can therefore generate exactly its own
// elements, and the same seed gives the same model at every parallel layout (SPEC §2).
#pragma once

#include <cstdint>
#include <string_view>

namespace boostlm {

uint64_t hash_name(std::string_view name);  // FNV-1a, 64-bit

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Standard normal sample number `index` of the stream (seed, name).
float normal_at(uint64_t seed, std::string_view name, int64_t index);

// out[j] = stddev * normal_at(seed, name, index_of(j)) for a rectangular slice of a row-major
// tensor: rows [row_begin, row_begin + rows), columns [col_begin, col_begin + cols) of a tensor
// with `full_cols` columns. out is rows x cols, contiguous.
void fill_normal_slice(float* out, uint64_t seed, std::string_view name, float stddev,
                       int64_t full_cols, int64_t row_begin, int64_t rows, int64_t col_begin,
                       int64_t cols);

// out[j] = bound · (2u − 1), u uniform in [0, 1) from (seed, name, index_of(j)): the same slice
// as fill_normal_slice, drawn uniformly from [−bound, bound) (Kaiming-uniform initialisation).
void fill_uniform_slice(float* out, uint64_t seed, std::string_view name, float bound,
                        int64_t full_cols, int64_t row_begin, int64_t rows, int64_t col_begin,
                        int64_t cols);

// A small stateful generator for sampling, shuffling and tests (xoshiro256**).
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next_u64();
  double uniform();  // [0, 1)
  float normal();
  int64_t below(int64_t n);  // [0, n)
  uint64_t state[4];
};

}  // namespace boostlm
