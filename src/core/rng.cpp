#include "core/rng.h"

#include <cmath>

namespace boostlm {

uint64_t hash_name(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

namespace {
// Box-Muller on a pair of counter-derived uniforms; element 2p and 2p+1 share pair p.
inline float normal_from_key(uint64_t key, int64_t index) {
  uint64_t bits = splitmix64(key + static_cast<uint64_t>(index >> 1) * 0xd1b54a32d192ed03ull);
  double u1 = (static_cast<double>(bits >> 40) + 1.0) / 16777217.0;  // (0, 1]
  double u2 = static_cast<double>(bits & 0xffffffull) / 16777216.0;  // [0, 1)
  double radius = std::sqrt(-2.0 * std::log(u1));
  double angle = 2.0 * M_PI * u2;
  return static_cast<float>((index & 1) ? radius * std::sin(angle) : radius * std::cos(angle));
}
inline float uniform_from_key(uint64_t key, int64_t index) {
  const uint64_t bits = splitmix64(key + static_cast<uint64_t>(index) * 0x9e3779b97f4a7c15ull);
  return static_cast<float>(static_cast<double>(bits >> 11) * 0x1.0p-53);  // [0, 1)
}
inline uint64_t stream_key(uint64_t seed, std::string_view name) {
  return splitmix64(splitmix64(seed) ^ hash_name(name));
}
}  // namespace

float normal_at(uint64_t seed, std::string_view name, int64_t index) {
  return normal_from_key(stream_key(seed, name), index);
}

void fill_normal_slice(float* out, uint64_t seed, std::string_view name, float stddev,
                       int64_t full_cols, int64_t row_begin, int64_t rows, int64_t col_begin,
                       int64_t cols) {
  const uint64_t key = stream_key(seed, name);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = (row_begin + r) * full_cols + col_begin;
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = stddev * normal_from_key(key, base + c);
  }
}

void fill_uniform_slice(float* out, uint64_t seed, std::string_view name, float bound,
                        int64_t full_cols, int64_t row_begin, int64_t rows, int64_t col_begin,
                        int64_t cols) {
  const uint64_t key = stream_key(seed, name);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = (row_begin + r) * full_cols + col_begin;
    for (int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = bound * (2.0f * uniform_from_key(key, base + c) - 1.0f);
  }
}

Rng::Rng(uint64_t seed) {
  uint64_t s = seed;
  for (auto& word : state) word = splitmix64(s++);
}

uint64_t Rng::next_u64() {
  auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  const uint64_t result = rotl(state[1] * 5, 7) * 9;
  const uint64_t t = state[1] << 17;
  state[2] ^= state[0];
  state[3] ^= state[1];
  state[1] ^= state[2];
  state[0] ^= state[3];
  state[2] ^= t;
  state[3] = rotl(state[3], 45);
  return result;
}

double Rng::uniform() {
  return static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
}

float Rng::normal() {
  double u1 = 1.0 - uniform();
  double u2 = uniform();
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

int64_t Rng::below(int64_t n) {
  return static_cast<int64_t>(uniform() * static_cast<double>(n));
}

}  // namespace boostlm
