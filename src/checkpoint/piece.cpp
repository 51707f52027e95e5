#include "checkpoint/piece.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"

namespace boostlm {

namespace {

// Shapes come from a parsed index (at most 2^48 elements, checked there) or a model's table: an
// overflow here is a caller's bug, not bad input, and must not wrap to a small count.
int64_t times(int64_t a, int64_t b) {
  int64_t n = 0;
  const bool overflows = __builtin_mul_overflow(a, b, &n);
  BOOSTLM_ASSERT_MSG(!overflows, "TensorPiece: an element count overflows");
  return n;
}

int64_t product(const std::vector<int64_t>& shape, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to; ++i) n = times(n, shape[i]);
  return n;
}

}  // namespace

int64_t TensorPiece::box_numel() const {
  if (axis < 0) return product(shape, 0, shape.size());
  // The axes around the box's, times its size: no division by an axis that may have length 0.
  const auto a = static_cast<size_t>(axis);
  return times(times(product(shape, 0, a), size), product(shape, a + 1, shape.size()));
}

std::vector<int64_t> TensorPiece::stored_shape() const {
  if (flat_begin != 0 || flat_stop() != box_numel()) return {numel()};
  std::vector<int64_t> s = shape;
  if (axis >= 0) s[static_cast<size_t>(axis)] = size;
  return s;
}

bool TensorPiece::operator==(const TensorPiece& o) const {
  return shape == o.shape && axis == o.axis && (axis < 0 || (begin == o.begin && size == o.size)) &&
         flat_begin == o.flat_begin && flat_stop() == o.flat_stop();
}

TensorPiece whole_piece(const std::vector<int64_t>& shape) {
  TensorPiece p;
  p.shape = shape;
  return p;
}

TensorPiece piece_of(const ParamInfo& info) {
  TensorPiece p;
  p.shape = info.shape;
  if (info.shard_axis >= 0) {
    p.axis = info.shard_axis;
    p.begin = info.shard_begin;
    p.size = info.local_shape[static_cast<size_t>(info.shard_axis)];
  }
  return p;
}

TensorPiece piece_of(const ParamInfo& info, int64_t lo, int64_t hi) {
  TensorPiece p = piece_of(info);
  p.flat_begin = std::clamp<int64_t>(lo - info.offset, 0, info.numel);
  p.flat_end = std::clamp<int64_t>(hi - info.offset, 0, info.numel);
  if (p.flat_end < p.flat_begin) p.flat_end = p.flat_begin;
  return p;
}

std::vector<PieceRun> runs_of(const TensorPiece& piece) {
  // The box: `outer` blocks of `size · inner` consecutive tensor elements, block o starting at
  // o · extent · inner + begin · inner.
  std::vector<PieceRun> runs;
  int64_t outer = 1, inner = 1, extent = 1, begin = 0, size = 1;
  if (piece.axis >= 0) {
    const auto a = static_cast<size_t>(piece.axis);
    outer = product(piece.shape, 0, a);
    inner = product(piece.shape, a + 1, piece.shape.size());
    extent = piece.shape[a];
    begin = piece.begin;
    size = piece.size;
  } else {
    inner = product(piece.shape, 0, piece.shape.size());
  }
  const int64_t block = size * inner, lo = piece.flat_begin, hi = piece.flat_stop();
  if (block == 0 || hi <= lo) return runs;
  for (int64_t o = lo / block; o < outer && o * block < hi; ++o) {
    const int64_t b0 = std::max(lo, o * block), b1 = std::min(hi, (o + 1) * block);
    if (b1 <= b0) continue;
    runs.push_back({o * extent * inner + begin * inner + (b0 - o * block), b0 - lo, b1 - b0});
  }
  return runs;
}

int64_t copy_overlap(const TensorPiece& from, const void* src, const TensorPiece& to,
                     float* dst) {
  BOOSTLM_ASSERT_MSG(from.shape == to.shape, "copy_overlap: pieces of different tensors");
  const std::vector<PieceRun> a = runs_of(from), b = runs_of(to);
  const auto* bytes = static_cast<const unsigned char*>(src);
  int64_t copied = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].global, b[j].global);
    const int64_t hi = std::min(a[i].global + a[i].length, b[j].global + b[j].length);
    if (lo < hi) {
      std::memcpy(dst + b[j].local + lo - b[j].global,
                  bytes + (a[i].local + lo - a[i].global) * sizeof(float),
                  static_cast<size_t>(hi - lo) * sizeof(float));
      copied += hi - lo;
    }
    if (a[i].global + a[i].length < b[j].global + b[j].length)
      ++i;
    else
      ++j;
  }
  return copied;
}

bool covers_exactly_once(const std::vector<TensorPiece>& pieces, const std::vector<int64_t>& shape,
                         std::string* why) {
  std::vector<PieceRun> all;
  for (const TensorPiece& p : pieces) {
    if (p.shape != shape) {
      if (why) *why = "a piece has another shape than the tensor";
      return false;
    }
    for (const PieceRun& r : runs_of(p)) all.push_back(r);
  }
  std::sort(all.begin(), all.end(),
            [](const PieceRun& x, const PieceRun& y) { return x.global < y.global; });
  int64_t next = 0;
  for (const PieceRun& r : all) {
    if (r.global != next) {
      if (why)
        *why = r.global > next ? "elements " + std::to_string(next) + ".." +
                                     std::to_string(r.global - 1) + " are in no piece"
                               : "element " + std::to_string(r.global) + " is in two pieces";
      return false;
    }
    next += r.length;
  }
  const int64_t total = product(shape, 0, shape.size());
  if (next != total) {
    if (why)
      *why = "elements " + std::to_string(next) + ".." + std::to_string(total - 1) +
             " are in no piece";
    return false;
  }
  return true;
}

}  // namespace boostlm
