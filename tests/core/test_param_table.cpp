#include <gtest/gtest.h>

#include "core/param_table.h"
#include "core/rng.h"

namespace boostlm {
namespace {

TEST(ParamTable, ViewsAreAlignedAndDisjoint) {
  ParamTable t;
  t.add("a", {3, 5}, Init::normal, 0.02f, true);
  t.add("b", {7}, Init::ones, 0, false);
  EXPECT_EQ(t.at("a").offset, 0);
  EXPECT_EQ(t.at("b").offset % 16, 0);
  EXPECT_GE(t.at("b").offset, 15);
  EXPECT_EQ(t.parameter_count(), 22);
  EXPECT_EQ(t.find("c"), nullptr);
}

TEST(Rng, InitialisationDependsOnlyOnSeedNameAndIndex) {
  // The same tensor name in two different tables (different offsets) gets the same values.
  ParamTable t1, t2;
  t1.add("w", {4, 6}, Init::normal, 1.0f, true);
  t2.add("other", {5}, Init::ones, 0, false);
  t2.add("w", {4, 6}, Init::normal, 1.0f, true);
  FlatBuffer b1(t1.total_elements()), b2(t2.total_elements());
  init_parameters(t1, b1, 42);
  init_parameters(t2, b2, 42);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(b1.view(t1.at("w"))[i], b2.view(t2.at("w"))[i]);
  EXPECT_EQ(b2.view(t2.at("other"))[4], 1.0f);
  // A different seed or name gives different values.
  EXPECT_NE(normal_at(42, "w", 0), normal_at(43, "w", 0));
  EXPECT_NE(normal_at(42, "w", 0), normal_at(42, "v", 0));
}

TEST(Rng, ShardsGenerateTheirSliceOfTheFullTensor) {
  ParamTable full, rows, cols;
  full.add("w", {6, 8}, Init::normal, 0.5f, true);
  rows.add("w", {6, 8}, Init::normal, 0.5f, true, /*axis=*/0, /*begin=*/2, /*size=*/3);
  cols.add("w", {6, 8}, Init::normal, 0.5f, true, /*axis=*/1, /*begin=*/4, /*size=*/4);
  FlatBuffer bf(full.total_elements()), br(rows.total_elements()), bc(cols.total_elements());
  init_parameters(full, bf, 9);
  init_parameters(rows, br, 9);
  init_parameters(cols, bc, 9);
  const float* f = bf.data();
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 8; ++c) EXPECT_EQ(br.data()[r * 8 + c], f[(r + 2) * 8 + c]);
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(bc.data()[r * 4 + c], f[r * 8 + c + 4]);
}

TEST(Rng, NormalSamplesHaveUnitVariance) {
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = normal_at(1, "stats", i);
    sum += x;
    sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0, 0.01);
}

}  // namespace
}  // namespace boostlm
