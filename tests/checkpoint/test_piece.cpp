// Pieces of tensors (checkpoint/piece.h), the index that names them (checkpoint/index.h) and who
// writes what (assign_writers): resharding copies every element to its place, whatever two grids
// cut a tensor, and a replicated tensor is written exactly once, the bytes shared.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "checkpoint/index.h"
#include "checkpoint/piece.h"
#include "checkpoint/saver.h"
#include "core/error.h"

namespace boostlm {
namespace {

TensorPiece box(std::vector<int64_t> shape, int axis, int64_t begin, int64_t size,
                int64_t flat_begin = 0, int64_t flat_end = -1) {
  TensorPiece p;
  p.shape = std::move(shape);
  p.axis = axis;
  p.begin = begin;
  p.size = size;
  p.flat_begin = flat_begin;
  p.flat_end = flat_end;
  return p;
}

TEST(TensorPiece, RunsOfABoxAlongEachAxis) {
  // [4, 6] cut along axis 1 at columns 2..4: one run of 3 per row.
  const auto runs = runs_of(box({4, 6}, 1, 2, 3));
  ASSERT_EQ(runs.size(), 4u);
  for (int64_t o = 0; o < 4; ++o) {
    EXPECT_EQ(runs[o].global, o * 6 + 2);
    EXPECT_EQ(runs[o].local, o * 3);
    EXPECT_EQ(runs[o].length, 3);
  }
  // Along axis 0: one run.
  const auto rows = runs_of(box({4, 6}, 0, 1, 2));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].global, 6);
  EXPECT_EQ(rows[0].length, 12);
  // A flat range inside the column box: from the middle of row 1 to the middle of row 3.
  const auto clipped = runs_of(box({4, 6}, 1, 2, 3, 4, 10));
  ASSERT_EQ(clipped.size(), 3u);
  EXPECT_EQ(clipped[0].global, 6 + 2 + 1);
  EXPECT_EQ(clipped[0].length, 2);
  EXPECT_EQ(clipped[2].global, 3 * 6 + 2);
  EXPECT_EQ(clipped[2].local, 5);
  EXPECT_EQ(clipped[2].length, 1);
  EXPECT_EQ(box({4, 6}, 1, 2, 3, 4, 10).stored_shape(), std::vector<int64_t>{6});
  EXPECT_EQ(box({4, 6}, 1, 2, 3).stored_shape(), (std::vector<int64_t>{4, 3}));
}

// The pieces of one grid: `parts` boxes along `axis`, each then cut in `flats` flat ranges.
std::vector<TensorPiece> cut(const std::vector<int64_t>& shape, int axis, int parts, int flats) {
  std::vector<TensorPiece> out;
  for (int i = 0; i < parts; ++i) {
    const int64_t size = axis < 0 ? 0 : shape[axis] / parts;
    TensorPiece b = axis < 0 ? box(shape, -1, 0, 0) : box(shape, axis, i * size, size);
    const int64_t n = b.box_numel(), step = (n + flats - 1) / flats;
    for (int64_t lo = 0; lo < n; lo += step) {
      TensorPiece p = b;
      p.flat_begin = lo;
      p.flat_end = std::min(n, lo + step);
      out.push_back(p);
    }
    if (axis < 0) break;
  }
  return out;
}

// A piece's elements of the tensor whose element i is i.
std::vector<float> elements(const TensorPiece& p) {
  std::vector<float> v(static_cast<size_t>(p.numel()));
  for (const PieceRun& r : runs_of(p))
    for (int64_t k = 0; k < r.length; ++k) v[r.local + k] = static_cast<float>(r.global + k);
  return v;
}

TEST(TensorPiece, ReshardingCopiesEveryElementToItsPlace) {
  const std::vector<int64_t> shape = {8, 12, 3};
  for (int from_axis : {-1, 0, 1, 2})
    for (int to_axis : {-1, 0, 1, 2})
      for (int flats : {1, 3}) {
        const auto from = cut(shape, from_axis, from_axis == 2 ? 3 : 4, flats);
        const auto to = cut(shape, to_axis, to_axis == 2 ? 3 : 2, 2);
        std::string why;
        ASSERT_TRUE(covers_exactly_once(from, shape, &why)) << why;
        for (const TensorPiece& want : to) {
          std::vector<float> got(static_cast<size_t>(want.numel()), -1.0f);
          int64_t copied = 0;
          for (const TensorPiece& have : from)
            copied += copy_overlap(have, elements(have).data(), want, got.data());
          EXPECT_EQ(copied, want.numel());
          EXPECT_EQ(got, elements(want)) << from_axis << " -> " << to_axis;
        }
      }
}

TEST(TensorPiece, CoverageFindsGapsAndOverlaps) {
  std::string why;
  EXPECT_FALSE(covers_exactly_once({box({4, 6}, 0, 0, 2)}, {4, 6}, &why));
  EXPECT_NE(why.find("in no piece"), std::string::npos) << why;
  EXPECT_FALSE(covers_exactly_once({box({4, 6}, 0, 0, 3), box({4, 6}, 0, 2, 2)}, {4, 6}, &why));
  EXPECT_NE(why.find("in two pieces"), std::string::npos) << why;
  EXPECT_TRUE(covers_exactly_once({box({4, 6}, 1, 0, 3), box({4, 6}, 1, 3, 3)}, {4, 6}, &why));
}

TEST(CheckpointIndex, RoundTripsAndRefusesWhatCannotBeRead) {
  CheckpointIndex index;
  index.add("w", "model-r00000.safetensors", box({4, 6}, 1, 0, 3));
  index.add("w", "model-r00001.safetensors", box({4, 6}, 1, 3, 3));
  index.add("w.exp_avg", "optimizer-r00000.safetensors", box({4, 6}, -1, 0, 0, 0, 10));
  index.add("w.exp_avg", "optimizer-r00001.safetensors", box({4, 6}, -1, 0, 0, 10, 24));
  const std::string text = index.to_json().dump();
  const CheckpointIndex back = CheckpointIndex::parse(text, "index.json");
  ASSERT_EQ(back.tensors.size(), 2u);
  EXPECT_EQ(back.tensors.at("w").pieces[1].piece, index.tensors.at("w").pieces[1].piece);
  EXPECT_EQ(back.tensors.at("w.exp_avg").pieces[1].piece.flat_begin, 10);
  auto refuses = [&](const std::string& from, const std::string& to, const std::string& says) {
    std::string bad = text;
    const size_t at = bad.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    bad.replace(at, from.size(), to);
    try {
      CheckpointIndex::parse(bad, "index.json");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refuses("model-r00001.safetensors", "../x.safetensors", "not a plain file name");
  refuses("\"begin\":3", "\"begin\":4", "outside the tensor");
  refuses("[10,24]", "[11,24]", "in no piece");
  refuses("[0,10]", "[0,11]", "in two pieces");
  refuses("\"version\":1", "\"version\":2", "\"version\" must be 1");
  EXPECT_THROW(CheckpointIndex::parse("[1]", "index.json"), Error);
  // A field of the wrong JSON type is refused as such, not as a JSON library exception (the
  // fuzzer's find: "format" as an object).
  auto refuses_text = [](const std::string& bad, const std::string& says) {
    try {
      CheckpointIndex::parse(bad, "index.json");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refuses_text(R"({"format": {"a": 1}, "version": 1, "tensors": {}})", "\"format\" is not");
  refuses_text(R"({"format": 7})", "\"format\" is not");
}

// Crafted indexes that once crashed the loader or slipped through: a cut along an axis of length
// 0 (box_numel divided by it: SIGFPE), a shape whose element count wraps int64 to 0 (accepted as
// an empty tensor), and begin + size past int64 (wrapped negative, inside the tensor). Each is
// refused with the parser's Error. The same texts seed the fuzzer (corpus/checkpoint_index/).
TEST(CheckpointIndex, RefusesCraftedShapesAndRanges) {
  auto index_of = [](const std::string& tensor) {
    return R"({"format": "boostlm-sharded", "version": 1, "tensors": {"t": )" + tensor + "}}";
  };
  auto refuses = [&](const std::string& tensor, const std::string& says) {
    try {
      CheckpointIndex::parse(index_of(tensor), "index.json");
      ADD_FAILURE() << "accepted " << tensor;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refuses(R"({"shape": [0, 4], "pieces": [{"file": "a", "axis": 0, "begin": 0, "size": 0}]})",
          "whose length is 0");
  refuses(R"({"shape": [4, 0], "pieces": [{"file": "a", "axis": 1, "begin": 0, "size": 0},
                                          {"file": "b", "axis": 1, "begin": 0, "size": 0}]})",
          "whose length is 0");
  // 2^40 · 2^40 = 2^80, 0 modulo 2^64.
  refuses(R"({"shape": [1099511627776, 1099511627776], "pieces": [{"file": "a"}]})",
          "more than 2^48 elements");
  refuses(R"({"shape": [1099511627776, 1099511627776, 0], "pieces": [{"file": "a"}]})",
          "more than 2^48 elements");
  refuses(R"({"shape": [65536, 65536, 65536, 65536], "pieces": [{"file": "a"}]})",
          "more than 2^48 elements");
  refuses(R"({"shape": [4, 6], "pieces": [
               {"file": "a", "axis": 0, "begin": 1, "size": 9223372036854775807},
               {"file": "b", "axis": 0, "begin": 0, "size": 1}]})",
          "outside the tensor");
  refuses(R"({"shape": [4, 6], "pieces": [{"file": "a", "flat": [0, 4611686018427387904]}]})",
          "outside its box");
  // A tensor of no elements stored whole is well formed (and reads as nothing).
  const CheckpointIndex empty =
      CheckpointIndex::parse(index_of(R"({"shape": [0, 4], "pieces": [{"file": "a"}]})"), "i");
  EXPECT_EQ(empty.tensors.at("t").pieces[0].piece.numel(), 0);
  // And a box along an axis of length 0 counts its elements without dividing by that length.
  EXPECT_EQ(box({0, 4}, 0, 0, 0).box_numel(), 0);
  EXPECT_EQ(box({3, 0, 4}, 1, 0, 0).box_numel(), 0);
  EXPECT_EQ(box({3, 5, 4}, 1, 1, 2).box_numel(), 24);
}

// Every rank's assignment together: each piece written once, the bytes spread over the replicas.
TEST(AssignWriters, EveryTensorOnceTheBytesShared) {
  ParamTable table;
  // Two sharded matrices and unsharded vectors of several sizes, as a stage of TP 2 sees them.
  for (int tp_rank = 0; tp_rank < 1; ++tp_rank) {
    table.add("a", {64, 32}, Init::normal, 0.02f, true, 0, 0, 32);
    table.add("b", {64, 64}, Init::normal, 0.02f, true, 1, 0, 32);
    for (int i = 0; i < 12; ++i)
      table.add("v" + std::to_string(i), {16 * (i + 1)}, Init::ones, 0, false);
  }
  for (int dp : {1, 2, 4}) {
    const int tp = 2;
    std::vector<int> writes(table.entries().size(), 0);
    std::vector<double> bytes;
    for (int d = 0; d < dp; ++d)
      for (int t = 0; t < tp; ++t) {
        const ShardRanks r{t, tp, 0, 1, d, dp};
        const WriteAssignment w = assign_writers(table, r, false, 0, table.total_elements());
        double mine = 0;
        for (size_t i = 0; i < writes.size(); ++i) {
          const ParamInfo& p = table.entries()[i];
          // A sharded tensor: each TP rank writes its own shard (counted once per TP rank).
          if (w.weights[i]) writes[i] += p.shard_axis >= 0 ? (t == 0 ? 1 : 0) : 1;
          if (w.weights[i]) mine += static_cast<double>(p.numel);
          EXPECT_EQ(w.weights[i], w.moments[i]);
        }
        bytes.push_back(mine);
      }
    for (size_t i = 0; i < writes.size(); ++i)
      EXPECT_EQ(writes[i], 1) << table.entries()[i].name << " at dp " << dp;
    const double most = *std::max_element(bytes.begin(), bytes.end());
    const double total = std::accumulate(bytes.begin(), bytes.end(), 0.0);
    EXPECT_LE(most, 1.5 * total / static_cast<double>(bytes.size()) + 2048) << "dp " << dp;
  }
}

}  // namespace
}  // namespace boostlm
