// NextHopCache without the kernel: what it learns from frames it answers from memory, it stays
// within its bound (least recently used out first), and a learned entry past its validity is
// still used while the kernel is asked. The interface index is 0 (none), so every question to
// the kernel finds nothing: the counters show each one.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>

#include "stack/next_hop_cache.h"
#include "stack/next_hop_route.h"
#include "tests/support/packet_builder.h"

namespace xdpfwd {
namespace {

in_addr Ip(uint32_t host_order) {
  in_addr a{};
  a.s_addr = htonl(host_order);
  return a;
}

MacAddress Mac(uint8_t last) { return MacAddress{0x02, 0, 0, 0, 0, last}; }

in6_addr Ip6(const char* text) {
  in6_addr a{};
  EXPECT_EQ(inet_pton(AF_INET6, text, &a), 1) << text;
  return a;
}

bool Same(const in6_addr& a, const in6_addr& b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

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

// The routing policy beside the cache (stack/next_hop_route.h): on the backend side's /32 with
// a gateway, everything but the interface's own address goes through the gateway and only an
// on-link peer's SYN teaches a MAC; on the client side (no gateway) every address is on-link.
TEST(NextHopRoute, OnLinkPeersDirectlyTheRestThroughTheGateway) {
  NextHopRoute backend_side(0, Ip(0x0a000001), Ip(0xffffffff), Ip(0x0a0000fe));
  EXPECT_TRUE(backend_side.OnLink(Ip(0x0a000001)));
  EXPECT_FALSE(backend_side.OnLink(Ip(0x0a000002)));
  EXPECT_EQ(backend_side.NextHop(Ip(0x0a000002)).s_addr, Ip(0x0a0000fe).s_addr);
  NextHopRoute lan(0, Ip(0x0a000001), Ip(0xffffff00), Ip(0x0a0000fe));
  EXPECT_TRUE(lan.OnLink(Ip(0x0a000002)));
  EXPECT_EQ(lan.NextHop(Ip(0x0a000002)).s_addr, Ip(0x0a000002).s_addr);
  EXPECT_EQ(lan.NextHop(Ip(0x0b000002)).s_addr, Ip(0x0a0000fe).s_addr);
  NextHopRoute client_side(0, Ip(0x0a010001), Ip(0), Ip(0));
  EXPECT_TRUE(client_side.OnLink(Ip(0xc6120001)));
}

TEST(NextHopRoute, ASynFromAnOnLinkPeerTeachesItsMacAndDataFramesDoNot) {
  NextHopRoute lan(0, Ip(0x0a000001), Ip(0xffffff00), Ip(0));
  const test::Mac peer{2, 0, 0, 0, 0, 7};
  const auto data = test::Packet()
                        .Eth(0x0800, peer)
                        .IPv4("10.0.0.2", "10.0.0.1")
                        .Tcp(40000, 9001, 0x10)
                        .Payload("x")
                        .Build();
  lan.LearnFromSyn(data.data(), data.size(), 1000);
  EXPECT_EQ(lan.next_hops().size(), 0u) << "an ACK with data teaches nothing";
  const auto syn =
      test::Packet().Eth(0x0800, peer).IPv4("10.0.0.2", "10.0.0.1").Tcp(40000, 9001, 0x02).Build();
  lan.LearnFromSyn(syn.data(), syn.size(), 1000);
  EXPECT_EQ(lan.Resolve(Ip(0x0a000002), 1001), Mac(7));
  const auto cut = test::Packet()
                       .Eth(0x0800, test::Mac{2, 0, 0, 0, 0, 8})
                       .IPv4("10.0.0.3", "10.0.0.1")
                       .Tcp(40000, 9001, 0x02)
                       .TruncateTo(14 + 20 + 10)
                       .Build();
  lan.LearnFromSyn(cut.data(), cut.size(), 1000);
  EXPECT_EQ(lan.next_hops().size(), 1u) << "a frame cut before the TCP flags teaches nothing";
}

// IPv6 (issue #31): the interface 2001:db8:1::1/64 behind the router fe80::1 (a link-local
// gateway, as IPv6 routers usually are). On-link: the /64, any link-local address, and with no
// gateway everything; a prefix that ends inside a byte is compared to the bit.
TEST(NextHopRoute, Ipv6OnLinkPrefixesAndLinkLocalPeersDirectlyTheRestThroughTheGateway) {
  Ipv6Interface v6;
  v6.addr = Ip6("2001:db8:1::1");
  v6.prefix_len = 64;
  v6.gateway = Ip6("fe80::1");
  NextHopRoute lan(0, Ip(0x0a000001), Ip(0xffffff00), Ip(0x0a0000fe), v6);
  EXPECT_TRUE(lan.OnLink(Ip6("2001:db8:1::2")));
  EXPECT_TRUE(lan.OnLink(Ip6("2001:db8:1:0:ffff::9")));
  EXPECT_FALSE(lan.OnLink(Ip6("2001:db8:1:1::2")));
  EXPECT_FALSE(lan.OnLink(Ip6("2001:db8:2::1")));
  EXPECT_TRUE(lan.OnLink(Ip6("fe80::1234"))) << "link-local is on every link";
  EXPECT_TRUE(Same(lan.NextHop(Ip6("2001:db8:1::2")), Ip6("2001:db8:1::2")));
  EXPECT_TRUE(Same(lan.NextHop(Ip6("2001:db8:9::2")), Ip6("fe80::1")));
  EXPECT_TRUE(Same(lan.NextHop(Ip6("fe80::77")), Ip6("fe80::77")));
  // IPv4 is unchanged beside it.
  EXPECT_EQ(lan.NextHop(Ip(0x0b000002)).s_addr, Ip(0x0a0000fe).s_addr);

  v6.prefix_len = 61;  // 2001:db8:1::/61 holds 2001:db8:1:0-7::
  NextHopRoute odd(0, Ip(0x0a000001), Ip(0xffffff00), Ip(0), v6);
  EXPECT_TRUE(odd.OnLink(Ip6("2001:db8:1:7::1")));
  EXPECT_FALSE(odd.OnLink(Ip6("2001:db8:1:8::1")));
  v6.gateway = Ip6("::");
  NextHopRoute flat(0, Ip(0x0a000001), Ip(0xffffff00), Ip(0), v6);
  EXPECT_TRUE(flat.OnLink(Ip6("2001:db8:9::2"))) << "no gateway: everything is on-link";
}

TEST(NextHopRoute, Ipv6SynFromAnOnLinkPeerTeachesItsMacAndOneBehindTheRouterDoesNot) {
  Ipv6Interface v6;
  v6.addr = Ip6("2001:db8:1::1");
  v6.prefix_len = 64;
  v6.gateway = Ip6("fe80::1");
  NextHopRoute lan(0, Ip(0x0a000001), Ip(0xffffff00), Ip(0), v6);
  const test::Mac peer{2, 0, 0, 0, 0, 7};
  const auto data = test::Packet()
                        .Eth(0x86dd, peer)
                        .IPv6("2001:db8:1::2", "2001:db8:1::1")
                        .Tcp(40000, 9001, 0x10)
                        .Payload("x")
                        .Build();
  lan.LearnFromSyn(data.data(), data.size(), 1000);
  EXPECT_EQ(lan.next_hops().size(), 0u) << "an ACK with data teaches nothing";
  const auto syn = test::Packet()
                       .Eth(0x86dd, peer)
                       .IPv6("2001:db8:1::2", "2001:db8:1::1")
                       .Tcp(40000, 9001, 0x02)
                       .Build();
  lan.LearnFromSyn(syn.data(), syn.size(), 1000);
  EXPECT_EQ(lan.Resolve(Ip6("2001:db8:1::2"), 1001), Mac(7));
  const auto routed = test::Packet()
                          .Eth(0x86dd, test::Mac{2, 0, 0, 0, 0, 8})
                          .IPv6("2001:db8:5::2", "2001:db8:1::1")
                          .Tcp(40000, 9001, 0x02)
                          .Build();
  lan.LearnFromSyn(routed.data(), routed.size(), 1000);
  EXPECT_EQ(lan.next_hops().size(), 1u) << "behind the router the frame's MAC is the router's";
  const auto cut = test::Packet()
                       .Eth(0x86dd, test::Mac{2, 0, 0, 0, 0, 9})
                       .IPv6("2001:db8:1::3", "2001:db8:1::1")
                       .Tcp(40000, 9001, 0x02)
                       .TruncateTo(14 + 40 + 10)
                       .Build();
  lan.LearnFromSyn(cut.data(), cut.size(), 1000);
  EXPECT_EQ(lan.next_hops().size(), 1u) << "a frame cut before the TCP flags teaches nothing";
}

// An IPv4 address and the IPv6 address whose first four bytes are the same are two next hops.
TEST(NextHopCache, Ipv6AndIpv4EntriesAreApart) {
  NextHopCache cache(0);
  in6_addr six{};
  const in_addr four = Ip(0x0a000002);
  std::memcpy(&six, &four, sizeof(four));
  cache.Learn(four, Mac(4), 1000);
  cache.Learn(IpAddress::V6(six), Mac(6), 1000);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.Lookup(four, 1001), Mac(4));
  EXPECT_EQ(cache.Lookup(IpAddress::V6(six), 1001), Mac(6));
}

}  // namespace
}  // namespace xdpfwd
