// The device's RSS table through ETHTOOL_GRSSH: veth has none to give (its rx queue is the
// sender's transmit queue), which must read as "not available", not as a failure, so that
// N workers fall back to port slices there (forwarder/backend_ports.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include "stack/rss.h"
#include "tests/support/netns_topology.h"

namespace xdpfwd::test {
namespace {

TEST(RssTableTest, VethHasNoRssTableToRead) {
  if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
  TopologyOptions options;
  options.queues = 2;
  Topology topo(options);
  auto table = ReadRssTable(topo.client_side_if());
  ASSERT_FALSE(table) << "veth reported an RSS table";
  EXPECT_TRUE(RssUnavailable(table.error())) << table.error().message();
  EXPECT_NE(table.error().message().find(topo.client_side_if()), std::string::npos);
  EXPECT_NE(table.error().message().find("not available"), std::string::npos);
}

TEST(RssTableTest, AMissingInterfaceIsAnErrorNotUnavailable) {
  auto table = ReadRssTable("xdpfwd-nosuch0");
  ASSERT_FALSE(table);
  EXPECT_FALSE(RssUnavailable(table.error())) << table.error().message();
}

}  // namespace
}  // namespace xdpfwd::test
