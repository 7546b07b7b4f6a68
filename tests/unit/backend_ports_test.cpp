// The relay's backend port allocator: FIFO reuse, generations, the default space around the
// kernel's ephemeral range.
#include "forwarder/backend_ports.h"

#include <gtest/gtest.h>

#include <set>

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

}  // namespace
}  // namespace xdpfwd
