// Latency histogram for the load generator: log-linear buckets (HDR-style) over the whole
// uint64 range of nanoseconds, O(1) record, percentiles within 0.4%, exact count/min/max/mean.
#pragma once

#include <cstdint>
#include <vector>

namespace xdpfwd::loadgen {

// Each power-of-two range [2^e, 2^(e+1)) is split into 128 linear buckets, and values below 256
// get one bucket each. A bucket holding v >= 256 spans [s * 2^j, (s + 1) * 2^j) with
// 128 <= s < 256, and a percentile reports the bucket's midpoint, so it is off from the true
// sample by at most 2^(j-1) <= v / 256: relative error <= 1/256 (0.39%); values below 256 are
// exact. 7,424 buckets (58 KiB) cover every uint64, so nothing is ever clamped.
class Histogram {
 public:
  static constexpr int kSubBucketBits = 7;
  static constexpr double kMaxRelativeError = 1.0 / (2 << kSubBucketBits);

  Histogram();

  void Record(uint64_t value);
  void Merge(const Histogram& other);

  uint64_t count() const { return count_; }
  // 0 when empty.
  uint64_t min() const { return count_ ? min_ : 0; }
  uint64_t max() const { return max_; }
  double mean() const;
  // The value at quantile q (0..1, so 0.99 is p99): the smallest recorded value with at least
  // q * count() values at or below it, within kMaxRelativeError and never outside [min, max];
  // exact for the first and last rank (min and max). 0 when empty.
  uint64_t ValueAtQuantile(double q) const;

 private:
  std::vector<uint64_t> buckets_;
  uint64_t count_ = 0;
  uint64_t min_ = UINT64_MAX;
  uint64_t max_ = 0;
  unsigned __int128 sum_ = 0;  // 2^64 ns is only 584 years, but a sum of many could pass it
};

}  // namespace xdpfwd::loadgen
