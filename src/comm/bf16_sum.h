// The host's sums of bf16 activation messages (issue 60), shared by the MPI reduction operators of
// comm/communicator.cpp and the two-rank exchanges of comm/overlap.cpp, so a bf16 all-reduce gives
// the same bits whichever of the two runs it.
//
// MPI has no bf16 type. A bf16 all-reduce is MPI_Allreduce over 16-bit elements with a user-defined
// operator that widens both operands to fp32, adds them and rounds the sum to bf16 (nearest even):
// the arithmetic is fp32, and each reduction step rounds its partial sum once, as NCCL's
// ncclBfloat16 sum does. Over a group of t ranks a value passes through at most t − 1 such steps
// (Open MPI's ring and recursive-doubling algorithms alike), so the result differs from the exactly
// rounded sum of the t (already bf16) inputs by at most (t − 1)·2⁻⁸·Σ|x_i| (2⁻⁸: bf16's unit
// roundoff, 8 significant bits): one rounding, 2⁻⁸ of the sum, at TP 2. The operator is commutative
// (fl(a + b) = fl(b + a)), so every rank ends with the same bits. The alternative, fp32
// accumulation inside a reduce-scatter + all-gather of bf16 pieces, rounds once at any t but needs
// t − 1 separate exchanges per rank instead of one library collective; TP groups here are 2 to 8.
//
// A row message (Communicator::all_reduce_rows) carries per row `values` bf16 activations and
// `stats` fp32 statistics that must not be rounded (Online-RMSNorm's Σx², SPEC §3.4, riding in the
// latent's all-reduce): on the host path one row is the values, padded to an even count, then the
// statistics, and the operator sums the values as above and the statistics in fp32 exactly as an
// MPI_FLOAT sum does, in one collective over rows.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace boostlm {

// inout[i] = bf16(float(in[i]) + float(inout[i])).
void sum_bf16(const bf16_t* in, bf16_t* inout, int64_t count);

// Where a row message's values and statistics lie in its buffer (Communicator::row_message).
struct RowMessage {
  int64_t rows = 0, values = 0, stats = 0;
  int64_t values_ld = 0;     // bf16 elements from one row's values to the next's
  int64_t stats_offset = 0;  // bytes from the buffer's start to row 0's statistics
  int64_t stats_ld = 0;      // floats from one row's statistics to the next's
  int64_t bytes = 0;         // the buffer's size
  bool interleaved = true;   // rows side by side (host); else all values, then all statistics
  // The payload counted for it: 2 bytes a value, 4 a statistic (padding not counted).
  int64_t payload_bytes() const { return rows * (2 * values + 4 * stats); }
  bf16_t* values_in(void* buffer) const { return static_cast<bf16_t*>(buffer); }
  float* stats_in(void* buffer) const {
    return stats == 0 ? nullptr
                      : reinterpret_cast<float*>(static_cast<char*>(buffer) + stats_offset);
  }
};
// The host's interleaved format: row r at r·(2·even(values) + 4·stats) bytes.
RowMessage interleaved_rows(int64_t rows, int64_t values, int64_t stats);
// The device's split format (NCCL reduces one type per call): every row's values, then every
// row's statistics at a 256-byte aligned offset.
RowMessage split_rows(int64_t rows, int64_t values, int64_t stats);

// Sums `rows` interleaved rows of `in` into `inout` (values as sum_bf16, statistics in fp32).
void sum_rows(const void* in, void* inout, int64_t rows, int64_t values, int64_t stats);

}  // namespace boostlm
