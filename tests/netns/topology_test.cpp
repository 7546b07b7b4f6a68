// The namespace topology itself: bytes cross from the client namespace to a server in the
// server namespace through the root namespace's routing (both directions, hashes checked),
// ping works, and everything is gone after the fixture, also when a test body throws.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "tests/support/netns_topology.h"
#include "tests/support/tcp.h"

namespace xdpfwd::test {
namespace {

using namespace std::chrono_literals;

bool NamespaceExists(const std::string& ns) {
  return RunCommand("", "ip netns list").output.find(ns) != std::string::npos;
}
bool LinkExists(const std::string& ifname) {
  return RunCommand("", "ip link show dev " + ifname).status == 0;
}

class TopologyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
  }
};

TEST_F(TopologyTest, EchoesBytesThroughRootNamespaceRouting) {
  Topology topo;
  UniqueFd listener = TcpListen(topo.server_ns(), topo.server_addr());
  const uint16_t port = LocalPort(listener.get());

  StreamStats server_received;
  std::thread server([&] {
    UniqueFd conn(accept(listener.get(), nullptr, nullptr));
    ASSERT_TRUE(conn);
    server_received = EchoUntilEof(conn.get());
  });

  ASSERT_TRUE(WaitForTcpPort(topo.client_ns(), topo.server_addr(), port, 5s));
  // WaitForTcpPort's probe connection is the first accept; serve it, then the real one.
  server.join();
  server = std::thread([&] {
    UniqueFd conn(accept(listener.get(), nullptr, nullptr));
    ASSERT_TRUE(conn);
    server_received = EchoUntilEof(conn.get());
  });

  UniqueFd client = TcpConnect(topo.client_ns(), topo.server_addr(), port);
  constexpr uint64_t kBytes = 32ull << 20;
  StreamStats sent;
  std::thread sender([&] { sent = SendPattern(client.get(), 42, kBytes); });
  const StreamStats echoed = ReceiveAll(client.get());
  sender.join();
  server.join();

  EXPECT_EQ(sent.bytes, kBytes);
  EXPECT_EQ(server_received.bytes, kBytes);
  EXPECT_EQ(server_received.hash, sent.hash) << "client -> server bytes differ";
  EXPECT_EQ(echoed.bytes, kBytes);
  EXPECT_EQ(echoed.hash, sent.hash) << "server -> client bytes differ";
}

TEST_F(TopologyTest, PingCrossesBothWays) {
  Topology topo;
  const auto there = topo.Run(topo.client_ns(), "ping -c 1 -W 2 " + ToString(topo.server_addr()));
  EXPECT_EQ(there.status, 0) << there.output;
  const auto back = topo.Run(topo.server_ns(), "ping -c 1 -W 2 " + ToString(topo.client_addr()));
  EXPECT_EQ(back.status, 0) << back.output;
}

TEST_F(TopologyTest, WaitForTcpPortTimesOutOnClosedPort) {
  Topology topo;
  const auto start = std::chrono::steady_clock::now();
  // Nothing listens in the server namespace: refused until the deadline.
  EXPECT_FALSE(WaitForTcpPort(topo.client_ns(), topo.server_addr(), 1, 300ms));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);
}

TEST_F(TopologyTest, RemovesEverythingEvenWhenTheBodyThrows) {
  std::string client_ns, server_ns, client_if, server_if;
  try {
    Topology topo({.mtu = 3500});
    client_ns = topo.client_ns();
    server_ns = topo.server_ns();
    client_if = topo.client_side_if();
    server_if = topo.server_side_if();
    ASSERT_TRUE(NamespaceExists(client_ns));
    ASSERT_TRUE(LinkExists(client_if));
    EXPECT_NE(RunCommand("", "ip link show dev " + client_if).output.find("mtu 3500"),
              std::string::npos);
    throw std::runtime_error("test body failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(NamespaceExists(client_ns));
  EXPECT_FALSE(NamespaceExists(server_ns));
  EXPECT_FALSE(LinkExists(client_if));
  EXPECT_FALSE(LinkExists(server_if));
}

TEST_F(TopologyTest, TwoTopologiesAtOnceDoNotCollide) {
  Topology a, b;
  EXPECT_NE(a.client_ns(), b.client_ns());
  EXPECT_NE(ToString(a.server_addr()), ToString(b.server_addr()));
  const auto r = b.Run(b.client_ns(), "ping -c 1 -W 2 " + ToString(b.server_addr()));
  EXPECT_EQ(r.status, 0) << r.output;
}

// A new topology keeps off a subnet the root namespace still holds sockets on (a TIME_WAIT
// left by an earlier test's kernel path, say, which would take a new client's SYN with the
// same 4-tuple) while a clean one is free: with a listener bound (IP_FREEBIND) on 198.18.k.1
// for every k but three unrouted ones, the topology takes one of the three.
TEST_F(TopologyTest, KeepsOffSubnetsTheRootNamespaceHoldsSocketsOn) {
  std::vector<int> clean;
  std::vector<UniqueFd> held;
  for (int k = 1; k <= 250; ++k) {
    if (k >= 100 && k < 200) continue;  // the benchmark smoke test's
    const std::string subnet = std::to_string(k) + ".0/24";
    const bool routed = !RunCommand("", "ip -4 route show 198.18." + subnet).output.empty() ||
                        !RunCommand("", "ip -4 route show 198.19." + subnet).output.empty();
    if (!routed && clean.size() < 3) {
      clean.push_back(k);
      continue;
    }
    UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    ASSERT_TRUE(fd);
    const int one = 1;
    ASSERT_EQ(setsockopt(fd.get(), IPPROTO_IP, IP_FREEBIND, &one, sizeof(one)), 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    ASSERT_EQ(inet_pton(AF_INET, ("198.18." + std::to_string(k) + ".1").c_str(), &a.sin_addr), 1);
    ASSERT_EQ(bind(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof(a)), 0) << k;
    ASSERT_EQ(listen(fd.get(), 1), 0);
    held.push_back(std::move(fd));
  }
  if (clean.size() < 3) GTEST_SKIP() << "fewer than 3 unrouted subnets to leave clean";
  Topology topo;
  const in_addr gw = topo.client_gw();
  const auto* b = reinterpret_cast<const unsigned char*>(&gw.s_addr);
  EXPECT_NE(std::find(clean.begin(), clean.end(), b[2]), clean.end())
      << "took 198.18." << int{b[2]} << ".0/24, not one of the clean three";
}

}  // namespace
}  // namespace xdpfwd::test
