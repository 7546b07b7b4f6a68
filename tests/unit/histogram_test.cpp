// The load generator's latency histogram: percentiles within the error bound it states, exact
// count/min/max/mean, and merging that loses nothing.
#include "bench/loadgen/histogram.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>

namespace xdpfwd::loadgen {
namespace {

static_assert(Histogram::kMaxRelativeError <= 0.01, "the benchmark promises 1% or better");

double RelativeError(uint64_t got, uint64_t want) {
  return std::abs(static_cast<double>(got) - static_cast<double>(want)) / static_cast<double>(want);
}

TEST(Histogram, EmptyReportsZeros) {
  Histogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.min(), 0u);
  EXPECT_EQ(h.max(), 0u);
  EXPECT_EQ(h.mean(), 0.0);
  EXPECT_EQ(h.ValueAtQuantile(0.5), 0u);
  EXPECT_EQ(h.ValueAtQuantile(1.0), 0u);
}

TEST(Histogram, SingleValueIsExactAtEveryQuantile) {
  Histogram h;
  h.Record(123'456'789);
  for (double q : {0.0, 0.5, 0.9, 0.999, 1.0}) EXPECT_EQ(h.ValueAtQuantile(q), 123'456'789u);
  EXPECT_EQ(h.min(), 123'456'789u);
  EXPECT_EQ(h.max(), 123'456'789u);
  EXPECT_EQ(h.mean(), 123'456'789.0);
}

TEST(Histogram, MinMaxAndMeanAreExact) {
  Histogram h;
  h.Record(1'000);
  h.Record(2'000);
  h.Record(987'654'321);
  EXPECT_EQ(h.count(), 3u);
  EXPECT_EQ(h.min(), 1'000u);
  EXPECT_EQ(h.max(), 987'654'321u);
  EXPECT_DOUBLE_EQ(h.mean(), (1'000.0 + 2'000.0 + 987'654'321.0) / 3);
  EXPECT_EQ(h.ValueAtQuantile(1.0), 987'654'321u);
  EXPECT_EQ(h.ValueAtQuantile(0.0), 1'000u);
  h.Record(987'654'000);  // same bucket as the max, below it: p100 is still the max exactly
  EXPECT_EQ(h.ValueAtQuantile(1.0), 987'654'321u);
}

TEST(Histogram, UniformDistributionPercentiles) {
  Histogram h;
  for (uint64_t v = 1; v <= 1'000'000; ++v) h.Record(v);
  EXPECT_EQ(h.count(), 1'000'000u);
  EXPECT_DOUBLE_EQ(h.mean(), 500'000.5);
  const std::pair<double, uint64_t> expected[] = {
      {0.5, 500'000}, {0.9, 900'000}, {0.99, 990'000}, {0.999, 999'000}};
  for (const auto& [q, want] : expected) {
    const uint64_t got = h.ValueAtQuantile(q);
    EXPECT_LE(RelativeError(got, want), 0.01) << "q=" << q << " got " << got;
    EXPECT_LE(RelativeError(got, want), Histogram::kMaxRelativeError) << "q=" << q;
  }
}

// Every value from 1 ns to 100 s (and the edges of every power-of-two range up to 2^63) comes
// back within the stated bound, and the bound is close to what actually happens.
TEST(Histogram, RelativeErrorBoundHoldsAcrossTheRange) {
  std::vector<uint64_t> values;
  for (double v = 1; v <= 100e9; v *= 1.01) values.push_back(static_cast<uint64_t>(v));
  for (int bit = 1; bit < 64; ++bit) {
    const uint64_t p = uint64_t{1} << bit;
    values.insert(values.end(), {p - 1, p, p + 1});
  }
  double worst = 0;
  for (uint64_t v : values) {
    // Neighbours at both ends so the median is v's bucket, not clamped to an exact min or max.
    Histogram h;
    h.Record(0);
    h.Record(v);
    h.Record(UINT64_MAX);
    const uint64_t got = h.ValueAtQuantile(0.5);
    const double err = RelativeError(got, v);
    ASSERT_LE(err, Histogram::kMaxRelativeError) << "value " << v << " reported as " << got;
    if (v < 256) {
      ASSERT_EQ(got, v) << "small values are exact";
    }
    worst = std::max(worst, err);
  }
  EXPECT_GT(worst, Histogram::kMaxRelativeError / 2) << "the stated bound is far too loose";
}

TEST(Histogram, QuantilesAreMonotonic) {
  Histogram h;
  std::mt19937_64 rng(42);
  std::lognormal_distribution<double> latency(11.0, 1.5);  // ~60 us median, long tail
  for (int i = 0; i < 100'000; ++i) h.Record(static_cast<uint64_t>(latency(rng)));
  uint64_t previous = 0;
  for (double q = 0; q <= 1.0; q += 0.001) {
    const uint64_t v = h.ValueAtQuantile(q);
    ASSERT_GE(v, previous) << "q=" << q;
    previous = v;
  }
  EXPECT_EQ(h.ValueAtQuantile(0), h.min());
  EXPECT_EQ(h.ValueAtQuantile(1), h.max());
}

TEST(Histogram, MergeEqualsRecordingEverythingInOne) {
  Histogram all, low, high;
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint64_t> dist(1, 50'000'000);
  for (int i = 0; i < 50'000; ++i) {
    const uint64_t v = dist(rng);
    all.Record(v);
    (i % 2 ? low : high).Record(v);
  }
  Histogram merged;
  merged.Merge(low);
  merged.Merge(high);
  EXPECT_EQ(merged.count(), all.count());
  EXPECT_EQ(merged.min(), all.min());
  EXPECT_EQ(merged.max(), all.max());
  EXPECT_DOUBLE_EQ(merged.mean(), all.mean());
  for (double q : {0.1, 0.5, 0.9, 0.99, 0.999}) {
    EXPECT_EQ(merged.ValueAtQuantile(q), all.ValueAtQuantile(q)) << "q=" << q;
  }
}

}  // namespace
}  // namespace xdpfwd::loadgen
