// NextHopCache without the kernel: what it learns from frames it answers from memory, it stays
// within its bound (least recently used out first), and a learned entry past its validity is
// still used while the kernel is asked. The interface index is 0 (none), so every question to
// the kernel finds nothing: the counters show each one.
#include <gtest/gtest.h>

#include "stack/next_hop_cache.h"

namespace xdpfwd {
namespace {

in_addr Ip(uint32_t host_order) {
  in_addr a{};
  a.s_addr = htonl(host_order);
  return a;
}

MacAddress Mac(uint8_t last) { return MacAddress{0x02, 0, 0, 0, 0, last}; }

TEST(NextHopCache, LearnedPeersNeedNoKernelLookup) {
  NextHopCache cache(0);
  cache.Learn(Ip(0xc6120001), Mac(1), 1000);
  EXPECT_EQ(cache.Lookup(Ip(0xc6120001), 1001), Mac(1));
  EXPECT_EQ(cache.Lookup(Ip(0xc6120001), 1000 + NextHopCache::kLearnedValidMs - 1), Mac(1));
  EXPECT_EQ(cache.kernel_lookups(), 0u);
  // A new MAC from a later SYN replaces the old one.
  cache.Learn(Ip(0xc6120001), Mac(2), 2000);
  EXPECT_EQ(cache.Lookup(Ip(0xc6120001), 2001), Mac(2));
  EXPECT_EQ(cache.kernel_lookups(), 0u);
}

TEST(NextHopCache, UnknownPeersAskTheKernelAtMostEveryRetryInterval) {
  NextHopCache cache(0);
  EXPECT_EQ(cache.Lookup(Ip(0xc6120002), 1000), std::nullopt);
  EXPECT_EQ(cache.Lookup(Ip(0xc6120002), 1000 + NextHopCache::kRetryMs - 1), std::nullopt);
  EXPECT_EQ(cache.kernel_lookups(), 1u);
  EXPECT_EQ(cache.resolution_requests(), 1u);
  EXPECT_EQ(cache.Lookup(Ip(0xc6120002), 1000 + NextHopCache::kRetryMs), std::nullopt);
  EXPECT_EQ(cache.kernel_lookups(), 2u);
}

TEST(NextHopCache, StaleLearnedEntryIsUsedWhileTheKernelIsAsked) {
  NextHopCache cache(0);
  cache.Learn(Ip(0xc6120003), Mac(3), 1000);
  const uint64_t stale = 1000 + NextHopCache::kLearnedValidMs;
  EXPECT_EQ(cache.Lookup(Ip(0xc6120003), stale), Mac(3));
  EXPECT_EQ(cache.kernel_lookups(), 1u);
  EXPECT_EQ(cache.resolution_requests(), 1u);
  EXPECT_EQ(cache.Lookup(Ip(0xc6120003), stale + 1), Mac(3));
  EXPECT_EQ(cache.kernel_lookups(), 1u) << "asked again within the validity";
}

// A SYN flood from spoofed sources teaches the cache one entry per source: the bound holds
// the memory, and the entries in use are the ones kept.
TEST(NextHopCache, BoundedLeastRecentlyUsedFirst) {
  NextHopCache cache(0, 3);
  cache.Learn(Ip(1), Mac(1), 10);
  cache.Learn(Ip(2), Mac(2), 11);
  cache.Learn(Ip(3), Mac(3), 12);
  EXPECT_EQ(cache.Lookup(Ip(1), 13), Mac(1));  // 1 is now the most recently used
  for (uint32_t i = 4; i < 1000; ++i) {
    cache.Learn(Ip(i), Mac(static_cast<uint8_t>(i)), 14);
    cache.Lookup(Ip(1), 14);
  }
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.evicted(), 996u);
  EXPECT_EQ(cache.Lookup(Ip(1), 15), Mac(1));
  EXPECT_EQ(cache.Lookup(Ip(999), 15), Mac(static_cast<uint8_t>(999)));
  EXPECT_EQ(cache.kernel_lookups(), 0u);
  EXPECT_EQ(cache.Lookup(Ip(2), 15), std::nullopt) << "evicted long ago";
}

}  // namespace
}  // namespace xdpfwd
