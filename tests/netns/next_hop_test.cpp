// Next hops on the fast path, through the real binary on a fresh topology: the backend's MAC is
// resolved before the forwarder says ready, and a client's is learned from its SYN, so the
// first connection's segments never wait for a neighbour (tx_no_neighbor stays 0) and no
// netlink lookup is made on its behalf from the worker.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "tests/support/backend.h"
#include "tests/support/forwarder_process.h"
#include "tests/support/netns_topology.h"
#include "tests/support/tcp.h"

namespace xdpfwd::test {
namespace {

constexpr uint16_t kPort = 9000;  // inside this test's own topology only

std::string Addr(in_addr a, uint16_t port) { return ToString(a) + ":" + std::to_string(port); }

class NextHopTest : public ::testing::TestWithParam<bool> {};

// Param: the client knows the gateway's MAC statically, so it never sends an ARP request and
// the kernel on the forwarder's side never learns the client's MAC: only its SYN can tell.
TEST_P(NextHopTest, FirstConnectionWaitsForNoNeighbour) {
  if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
  Topology topo;
  if (GetParam()) {
    const std::string mac =
        topo.Run("", "cat /sys/class/net/" + topo.client_side_if() + "/address").output;
    ASSERT_FALSE(mac.empty());
    const CommandResult r =
        topo.Run(topo.client_ns(), "ip neigh replace " + ToString(topo.client_gw()) + " lladdr " +
                                       mac.substr(0, mac.find('\n')) + " dev " + Topology::kNsIf +
                                       " nud permanent");
    ASSERT_EQ(r.status, 0) << r.output;
  }
  Backend backend(TcpListen(topo.server_ns(), topo.server_addr(), kPort), EchoUntilEofOrReset);
  ForwarderProcess fwd("xdp", Addr(topo.client_gw(), kPort), Addr(topo.server_addr(), kPort));
  {
    UniqueFd client = TcpConnect(topo.client_ns(), topo.client_gw(), kPort);
    BoundWaits(client.get());
    const StreamStats sent = SendPattern(client.get(), 1, 4096);
    const StreamStats back = ReceiveAll(client.get());
    EXPECT_EQ(back.bytes, sent.bytes);
    EXPECT_EQ(back.hash, sent.hash);
  }
  ASSERT_TRUE(backend.WaitServed(1));
  const auto stats = fwd.Stats();
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.tx_no_neighbor"), 0u) << fwd.output();
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.next_hops"), 2u)
      << "the client (learned from its SYN) and the backend";
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.accepted"), 1u);
}

INSTANTIATE_TEST_SUITE_P(ClientArp, NextHopTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "Silent" : "Asks"; });

}  // namespace
}  // namespace xdpfwd::test
