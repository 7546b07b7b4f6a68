// Log-linear latency histogram; see histogram.h for the layout and its error bound.
#include "bench/loadgen/histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace xdpfwd::loadgen {
namespace {

constexpr uint64_t kSubBuckets = uint64_t{1} << Histogram::kSubBucketBits;  // 128
constexpr uint64_t kExactBelow = 2 * kSubBuckets;                           // 256
// Values with bit width w >= 9 sit in range shift = w - 8, at index shift * 128 + (v >> shift);
// the top range (shift 56) ends at index 56 * 128 + 255.
constexpr size_t kBuckets = (64 - Histogram::kSubBucketBits + 1) * kSubBuckets;

size_t BucketOf(uint64_t v) {
  if (v < kExactBelow) return v;
  const int shift = std::bit_width(v) - 1 - Histogram::kSubBucketBits;
  return static_cast<size_t>(shift) * kSubBuckets + (v >> shift);
}

uint64_t MidpointOf(size_t bucket) {
  if (bucket < kExactBelow) return bucket;
  const int shift = static_cast<int>(bucket / kSubBuckets) - 1;
  const uint64_t low = (bucket - static_cast<uint64_t>(shift) * kSubBuckets) << shift;
  return low + (uint64_t{1} << (shift - 1));
}

}  // namespace

Histogram::Histogram() : buckets_(kBuckets, 0) {}

void Histogram::Record(uint64_t value) {
  ++buckets_[BucketOf(value)];
  ++count_;
  sum_ += value;
  min_ = std::min(min_, value);
  max_ = std::max(max_, value);
}

void Histogram::Merge(const Histogram& other) {
  for (size_t i = 0; i < kBuckets; ++i) buckets_[i] += other.buckets_[i];
  count_ += other.count_;
  sum_ += other.sum_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
}

double Histogram::mean() const {
  return count_ ? static_cast<double>(sum_) / static_cast<double>(count_) : 0.0;
}

uint64_t Histogram::ValueAtQuantile(double q) const {
  if (count_ == 0) return 0;
  const double clamped = std::clamp(q, 0.0, 1.0);
  const uint64_t rank = std::max<uint64_t>(
      1, static_cast<uint64_t>(std::ceil(clamped * static_cast<double>(count_))));
  // The extremes are known exactly; everything between is a bucket's midpoint.
  if (rank == 1) return min_;
  if (rank >= count_) return max_;
  uint64_t seen = 0;
  for (size_t i = 0; i < kBuckets; ++i) {
    seen += buckets_[i];
    if (seen >= rank) return std::clamp(MidpointOf(i), min_, max_);
  }
  return max_;
}

}  // namespace xdpfwd::loadgen
