// A piece of a tensor: the part of a full tensor (SPEC §2's name and shape) that one rank holds or
// one checkpoint file stores. Every shard this engine makes is a box: a range along one axis of
// the full tensor, whole along the others (ParamInfo's shard_axis, shard_begin, local_shape), and
// ZeRO-1 owns a flat range of a rank's buffer, so within the box a piece may keep only a flat
// range of the box's row-major elements. In either case a piece's elements, in its own order, are
// runs of consecutive elements of the full tensor in increasing order, which is all that copying
// between two pieces (resharding) needs.
#pragma once

#include <cstdint>
#include <vector>

#include "core/param_table.h"

namespace boostlm {

struct TensorPiece {
  std::vector<int64_t> shape;  // the full tensor's
  int axis = -1;               // -1: the whole tensor is the box
  int64_t begin = 0, size = 0;  // the box along `axis`
  int64_t flat_begin = 0, flat_end = -1;  // within the box's elements; -1: to its end

  int64_t box_numel() const;
  int64_t numel() const { return flat_stop() - flat_begin; }
  int64_t flat_stop() const { return flat_end < 0 ? box_numel() : flat_end; }
  // The shape it is stored with: the box's, or [numel] when it keeps part of the box.
  std::vector<int64_t> stored_shape() const;
  bool operator==(const TensorPiece& other) const;
};

// The whole of a full tensor of this shape.
TensorPiece whole_piece(const std::vector<int64_t>& shape);
// The box this rank holds of a table entry (its TP shard, or the whole tensor).
TensorPiece piece_of(const ParamInfo& info);
// The part of that box inside flat elements [lo, hi) of the table's buffer (ZeRO-1's range);
// numel() == 0 when they do not meet. Its elements start at buffer element
// info.offset + flat_begin.
TensorPiece piece_of(const ParamInfo& info, int64_t lo, int64_t hi);

// `length` consecutive elements: element `local` of the piece is element `global` of the tensor.
struct PieceRun {
  int64_t global = 0, local = 0, length = 0;
};
// A piece's runs, in increasing order of both positions.
std::vector<PieceRun> runs_of(const TensorPiece& piece);

// Copies the elements that `to` shares with `from` (pieces of one tensor) from src (holding
// `from`'s fp32 elements in order, at any alignment) into dst (`to`'s); returns how many.
int64_t copy_overlap(const TensorPiece& from, const void* src, const TensorPiece& to,
                     float* dst);

// Whether `pieces` cover every element of a tensor of `shape` exactly once (a checkpoint index's
// check); otherwise `why` says what is missing or held twice.
bool covers_exactly_once(const std::vector<TensorPiece>& pieces, const std::vector<int64_t>& shape,
                         std::string* why);

}  // namespace boostlm
