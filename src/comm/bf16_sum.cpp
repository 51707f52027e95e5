#include "comm/bf16_sum.h"

#include <cstring>

#include "core/error.h"

namespace boostlm {

void sum_bf16(const bf16_t* in, bf16_t* inout, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    inout[i] = float_to_bf16(bf16_to_float(in[i]) + bf16_to_float(inout[i]));
}

RowMessage interleaved_rows(int64_t rows, int64_t values, int64_t stats) {
  BOOSTLM_ASSERT(rows >= 0 && values >= 0 && stats >= 0);
  RowMessage m;
  m.rows = rows;
  m.values = values;
  m.stats = stats;
  const int64_t even = values + (values & 1);  // the statistics 4-byte aligned
  m.values_ld = even + 2 * stats;
  m.stats_offset = 2 * even;
  m.stats_ld = m.values_ld / 2;
  m.bytes = rows * 2 * m.values_ld;
  m.interleaved = true;
  return m;
}

RowMessage split_rows(int64_t rows, int64_t values, int64_t stats) {
  BOOSTLM_ASSERT(rows >= 0 && values >= 0 && stats >= 0);
  RowMessage m;
  m.rows = rows;
  m.values = values;
  m.stats = stats;
  m.values_ld = values;
  m.stats_offset = (2 * rows * values + 255) / 256 * 256;
  m.stats_ld = stats;
  m.bytes = m.stats_offset + 4 * rows * stats;
  m.interleaved = false;
  return m;
}

void sum_rows(const void* in, void* inout, int64_t rows, int64_t values, int64_t stats) {
  const RowMessage m = interleaved_rows(rows, values, stats);
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(inout);
  const int64_t row_bytes = 2 * m.values_ld;
  for (int64_t r = 0; r < rows; ++r) {
    const char* a = src + r * row_bytes;
    char* b = dst + r * row_bytes;
    // Through memcpy: MPI hands the operator buffers of its own, aligned for 16-bit elements only.
    for (int64_t c = 0; c < values; ++c) {
      bf16_t x, y;
      std::memcpy(&x, a + 2 * c, 2);
      std::memcpy(&y, b + 2 * c, 2);
      const bf16_t s = float_to_bf16(bf16_to_float(x) + bf16_to_float(y));
      std::memcpy(b + 2 * c, &s, 2);
    }
    for (int64_t k = 0; k < stats; ++k) {
      float x, y;
      std::memcpy(&x, a + m.stats_offset + 4 * k, 4);
      std::memcpy(&y, b + m.stats_offset + 4 * k, 4);
      const float s = x + y;
      std::memcpy(b + m.stats_offset + 4 * k, &s, 4);
    }
  }
}

}  // namespace boostlm
