// A latency distribution both paths keep per connection phase (the backend's connect time, the
// time to its first byte): power-of-two buckets from 1 µs to 33 s, one writer each, summable
// across workers and threads, rendered as a Prometheus histogram (forwarder/exposition.cpp).
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>

namespace xdpfwd {

// Bucket i counts durations under 2^i µs (bucket 0: under 1 µs); the last counts the rest.
inline constexpr int kLatencyBuckets = 27;

inline int LatencyBucket(uint64_t ns) {
  const int width = std::bit_width(ns / 1000);  // 0 for under 1 µs
  return width < kLatencyBuckets - 1 ? width : kLatencyBuckets - 1;
}

// The upper bound of bucket i in seconds (the last: +Inf, which the renderer writes).
inline double LatencyBucketSeconds(int i) { return static_cast<double>(uint64_t{1} << i) / 1e6; }

// A plain copy: what a snapshot and a sum hold.
struct LatencyHistogram {
  uint64_t buckets[kLatencyBuckets] = {};
  uint64_t count = 0;
  uint64_t sum_ns = 0;
  LatencyHistogram& operator+=(const LatencyHistogram& o) {
    for (int i = 0; i < kLatencyBuckets; ++i) buckets[i] += o.buckets[i];
    count += o.count;
    sum_ns += o.sum_ns;
    return *this;
  }
};

// The live one: one writer thread (a worker or an event loop), readers anywhere.
struct LatencyHistogramCounters {
  std::atomic<uint64_t> buckets[kLatencyBuckets] = {};
  std::atomic<uint64_t> count{0};
  std::atomic<uint64_t> sum_ns{0};

  // For the owning thread only: relaxed load and store, no locked instruction (as
  // RelayCounters::Add).
  void Observe(uint64_t ns) {
    Bump(buckets[LatencyBucket(ns)], 1);
    Bump(count, 1);
    Bump(sum_ns, ns);
  }
  LatencyHistogram Snapshot() const {
    LatencyHistogram h;
    for (int i = 0; i < kLatencyBuckets; ++i)
      h.buckets[i] = buckets[i].load(std::memory_order_relaxed);
    h.count = count.load(std::memory_order_relaxed);
    h.sum_ns = sum_ns.load(std::memory_order_relaxed);
    return h;
  }

 private:
  static void Bump(std::atomic<uint64_t>& c, uint64_t n) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
};

}  // namespace xdpfwd
