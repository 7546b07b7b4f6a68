// The relay's backend port allocator: FIFO reuse, generations, the default space around the
// kernel's ephemeral range.
#include "forwarder/backend_ports.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace xdpfwd {
namespace {

TEST(BackendPortsTest, DefaultSpaceIsEverythingFrom1024OutsideTheKernelsRange) {
  const auto ranges = DefaultBackendPorts(PortRange{32768, 60999});
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ToString(ranges), "1024-32767,61000-65535");
  EXPECT_EQ(BackendPorts(ranges).size(), 36280u);
  EXPECT_EQ(ToString(DefaultBackendPorts(PortRange{1024, 65535})), "");
  EXPECT_EQ(ToString(DefaultBackendPorts(PortRange{40000, 65535})), "1024-39999");
  EXPECT_EQ(ToString(DefaultBackendPorts(PortRange{500, 60999})), "61000-65535");
}

TEST(BackendPortsTest, OverlapWithTheKernelsRangeIsRefusedWithTheFix) {
  const auto r = CheckOutsideEphemeral(PortRange{60000, 61000}, PortRange{32768, 60999});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("--backend-ports"), std::string::npos);
  EXPECT_TRUE(CheckOutsideEphemeral(PortRange{61000, 65535}, PortRange{32768, 60999}));
}

TEST(BackendPortsTest, EveryPortOnceThenNothingUntilOneIsReleased) {
  BackendPorts ports({PortRange{100, 102}, PortRange{200, 201}});
  std::set<uint16_t> seen;
  for (int i = 0; i < 5; ++i) {
    const auto lease = ports.Acquire();
    ASSERT_TRUE(lease);
    EXPECT_TRUE(seen.insert(lease->port).second) << lease->port;
  }
  EXPECT_EQ(seen, (std::set<uint16_t>{100, 101, 102, 200, 201}));
  EXPECT_EQ(ports.in_use(), 5u);
  EXPECT_FALSE(ports.Acquire());
  ports.Release(101);
  ports.Release(101);  // twice: counted once
  ports.Release(7);    // not ours: ignored
  EXPECT_EQ(ports.in_use(), 4u);
  const auto again = ports.Acquire();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->port, 101);
}

TEST(BackendPortsTest, AReleasedPortComesBackLast) {
  BackendPorts ports({PortRange{1000, 1003}});
  const auto a = ports.Acquire();  // 1000
  ports.Release(a->port);
  // 1001, 1002, 1003 have waited longer than 1000.
  EXPECT_EQ(ports.Acquire()->port, 1001);
  EXPECT_EQ(ports.Acquire()->port, 1002);
  EXPECT_EQ(ports.Acquire()->port, 1003);
  EXPECT_EQ(ports.Acquire()->port, 1000);
}

TEST(BackendPortsTest, GenerationTellsADelayedRemovalThatThePortWasReused) {
  BackendPorts ports({PortRange{5000, 5000}});
  const auto first = ports.Acquire();
  EXPECT_FALSE(ports.IsIdleSince(*first));  // still held
  ports.Release(first->port);
  EXPECT_TRUE(ports.IsIdleSince(*first));
  const auto second = ports.Acquire();
  ports.Release(second->port);
  EXPECT_FALSE(ports.IsIdleSince(*first));  // reused since: the entry is the new connection's
  EXPECT_TRUE(ports.IsIdleSince(*second));
}

in_addr Ip(const char* dotted) {
  in_addr a{};
  inet_pton(AF_INET, dotted, &a);
  return a;
}

// A 4-queue device with the default key and a 128-entry table spreading the queues round
// robin (what `ethtool -X DEV equal 4` sets).
RssTable FourQueues() {
  RssTable t;
  t.key.assign(std::begin(kDefaultRssKey), std::end(kDefaultRssKey));
  for (uint32_t i = 0; i < 128; ++i) t.indirection.push_back(i % 4);
  return t;
}

// Every port picked for a worker's queues, hashed the slow way as the device will hash the
// backend's reply, lands on one of them; every port left out lands elsewhere.
TEST(RssPortsTest, PickedPortsAreExactlyThoseWhoseRepliesLandOnTheQueues) {
  const RssTable rss = FourQueues();
  const in_addr local = Ip("198.19.0.1"), backend = Ip("198.19.0.2");
  const std::vector<PortRange> ranges = {{1024, 32767}, {61000, 65535}};
  const std::vector<uint32_t> queues = {1, 3};
  const auto picked = PortsLandingOn(rss, queues, local, backend, 9001, ranges);
  const std::set<uint16_t> picked_set(picked.begin(), picked.end());
  ASSERT_EQ(picked_set.size(), picked.size());
  for (const PortRange& r : ranges) {
    for (uint32_t p = r.first; p <= r.last; ++p) {
      const uint32_t q =
          rss.QueueOf(ToeplitzIpv4Tcp(rss.key, backend, local, 9001, static_cast<uint16_t>(p)));
      ASSERT_EQ(picked_set.count(static_cast<uint16_t>(p)) == 1, q == 1 || q == 3) << p;
    }
  }
  // A hash worth the name spreads the ports: about half of 36,280 for two of four queues.
  EXPECT_GT(picked.size(), 36280u * 45 / 100);
  EXPECT_LT(picked.size(), 36280u * 55 / 100);
}

// The same for IPv6 backend legs (issue #31): the reply's hash is over the 16-byte addresses,
// the ports after them, so the port bytes sit elsewhere in the hash's input than for IPv4.
TEST(RssPortsTest, Ipv6PickedPortsAreExactlyThoseWhoseRepliesLandOnTheQueues) {
  const RssTable rss = FourQueues();
  in6_addr local6{}, backend6{};
  inet_pton(AF_INET6, "fd00:19::1", &local6);
  inet_pton(AF_INET6, "fd00:19::2", &backend6);
  const IpAddress local = IpAddress::V6(local6), backend = IpAddress::V6(backend6);
  const std::vector<PortRange> ranges = {{1024, 32767}, {61000, 65535}};
  const std::vector<uint32_t> queues = {0, 2};
  const auto picked = PortsLandingOn(rss, queues, local, backend, 9001, ranges);
  const std::set<uint16_t> picked_set(picked.begin(), picked.end());
  ASSERT_EQ(picked_set.size(), picked.size());
  for (const PortRange& r : ranges) {
    for (uint32_t p = r.first; p <= r.last; ++p) {
      const uint32_t q =
          rss.QueueOf(ToeplitzIpv6Tcp(rss.key, backend6, local6, 9001, static_cast<uint16_t>(p)));
      ASSERT_EQ(picked_set.count(static_cast<uint16_t>(p)) == 1, q == 0 || q == 2) << p;
    }
  }
  EXPECT_GT(picked.size(), 36280u * 45 / 100);
  EXPECT_LT(picked.size(), 36280u * 55 / 100);
  // Not the IPv4 hash: an IPv4 pair's ports are another set.
  EXPECT_NE(picked, PortsLandingOn(rss, queues, Ip("198.19.0.1"), Ip("198.19.0.2"), 9001, ranges));
  // A source and a backend of two families have no hash: no ports (the caller slices).
  EXPECT_TRUE(PortsLandingOn(rss, queues, Ip("198.19.0.1"), backend, 9001, ranges).empty());
}

// Workers owning different queues get disjoint ports that together cover the space: no
// shared allocator is needed.
TEST(RssPortsTest, WorkersWithDifferentQueuesShareNoPort) {
  const RssTable rss = FourQueues();
  const std::vector<PortRange> ranges = {{20000, 29999}};
  std::set<uint16_t> all;
  size_t total = 0;
  for (uint32_t q = 0; q < 4; ++q) {
    const uint32_t mine[] = {q};
    const auto ports = PortsLandingOn(rss, mine, Ip("10.0.0.1"), Ip("10.0.0.2"), 443, ranges);
    EXPECT_GT(ports.size(), 2000u) << q;
    total += ports.size();
    all.insert(ports.begin(), ports.end());
  }
  EXPECT_EQ(total, 10000u);
  EXPECT_EQ(all.size(), 10000u);
  // The backend is part of the hash: another backend gets another set.
  const uint32_t zero[] = {0};
  EXPECT_NE(PortsLandingOn(rss, zero, Ip("10.0.0.1"), Ip("10.0.0.2"), 443, ranges),
            PortsLandingOn(rss, zero, Ip("10.0.0.1"), Ip("10.0.0.3"), 443, ranges));
  EXPECT_TRUE(PortsLandingOn(rss, {}, Ip("10.0.0.1"), Ip("10.0.0.2"), 443, ranges).empty());
}

TEST(RssPortsTest, WithoutATableWorkersTakeDisjointSlices) {
  const std::vector<PortRange> ranges = {{100, 104}, {200, 202}};
  EXPECT_EQ(SliceOfPorts(ranges, 0, 2), (std::vector<uint16_t>{100, 102, 104, 201}));
  EXPECT_EQ(SliceOfPorts(ranges, 1, 2), (std::vector<uint16_t>{101, 103, 200, 202}));
  EXPECT_EQ(SliceOfPorts(ranges, 0, 1).size(), 8u);
  EXPECT_TRUE(SliceOfPorts(ranges, 2, 2).empty());
}

// An allocator over a picked set hands out those ports only, and keeps its FIFO and
// generation rules.
TEST(RssPortsTest, AnAllocatorOverPickedPortsHandsOutOnlyThose) {
  BackendPorts ports(std::vector<uint16_t>{700, 300, 500, 300});
  EXPECT_EQ(ports.size(), 3u);
  std::set<uint16_t> seen;
  for (int i = 0; i < 3; ++i) seen.insert(ports.Acquire()->port);
  EXPECT_EQ(seen, (std::set<uint16_t>{300, 500, 700}));
  EXPECT_FALSE(ports.Acquire());
  ports.Release(400);  // never ours: ignored
  EXPECT_FALSE(ports.Acquire());
  ports.Release(500);
  const auto again = ports.Acquire();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->port, 500);
  EXPECT_EQ(again->generation, 2u);
}

}  // namespace
}  // namespace xdpfwd
