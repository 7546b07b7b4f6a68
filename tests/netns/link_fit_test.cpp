// What the fast path refuses at start because its frames cannot hold the interface's packets
// (forwarder/link_fit.h), through the real xdpfwd binary: --path xdp exits with the fix,
// --path auto serves the rule on the kernel path, and the largest MTU it accepts relays.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "tests/support/backend.h"
#include "tests/support/child_process.h"
#include "tests/support/forwarder_process.h"
#include "tests/support/netns_topology.h"
#include "tests/support/tcp.h"

namespace xdpfwd::test {
namespace {

using namespace std::chrono_literals;

constexpr uint16_t kPort = 9000;
constexpr uint64_t kBytes = 4ull << 20;

std::string Addr(in_addr a, uint16_t port) { return ToString(a) + ":" + std::to_string(port); }

class LinkFitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
  }
  void Build(int mtu) { topo_ = std::make_unique<Topology>(TopologyOptions{mtu}); }
  std::string listen() const { return Addr(topo_->client_gw(), kPort); }
  std::string backend() const { return Addr(topo_->server_addr(), kPort); }
  RunResult RunXdpPath(const std::vector<std::string>& extra) const {
    std::vector<std::string> argv{ForwarderProcess::BinaryPath(), "--path", "xdp"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back(listen());
    argv.push_back(backend());
    return RunProgram(argv, 30s);
  }
  bool XdpAttached(const std::string& ifname) const {
    return RunCommand("", "ip -o link show dev " + ifname).output.find(" xdp") != std::string::npos;
  }
  // 4 MiB each way at once through the forwarder, echoed by the backend; hashes must match.
  void ExpectEchoBothWays() {
    Backend echo(TcpListen(topo_->server_ns(), topo_->server_addr(), kPort), EchoUntilEofOrReset);
    UniqueFd client = TcpConnect(topo_->client_ns(), topo_->client_gw(), kPort);
    BoundWaits(client.get());
    auto echoed = std::async(std::launch::async, [&] { return ReceiveAll(client.get()); });
    const StreamStats sent = SendPattern(client.get(), 12, kBytes);
    const StreamStats got = echoed.get();
    EXPECT_EQ(got.bytes, kBytes);
    EXPECT_EQ(got.hash, sent.hash);
    EXPECT_TRUE(echo.WaitServed(1));
  }

  std::unique_ptr<Topology> topo_;
};

TEST_F(LinkFitTest, JumboMtuRefusesTheXdpPathWithTheFix) {
  Build(9000);
  const RunResult r = RunXdpPath({});
  EXPECT_EQ(r.status, 1) << r.output;
  for (const std::string& part : {topo_->client_side_if() + ": MTU 9000 is above the 3506",
                                  std::string("mtu 3506"), std::string("--path kernel")}) {
    EXPECT_NE(r.output.find(part), std::string::npos) << part << " missing in:\n" << r.output;
  }
  EXPECT_EQ(r.output.find("ready"), std::string::npos) << r.output;
  EXPECT_FALSE(XdpAttached(topo_->client_side_if())) << "the refused fast path left XDP behind";
  EXPECT_FALSE(XdpAttached(topo_->server_side_if()));
}

TEST_F(LinkFitTest, JumboMtuInAutoModeIsServedByTheKernelPath) {
  Build(9000);
  ForwarderProcess fwd("auto", listen(), backend());
  EXPECT_NE(fwd.output().find("fast path unavailable, serving everything on the kernel path: " +
                              topo_->client_side_if() + ": MTU 9000"),
            std::string::npos)
      << fwd.output();
  EXPECT_FALSE(XdpAttached(topo_->client_side_if()));
  ExpectEchoBothWays();
  const auto stats = fwd.Stats();
  EXPECT_EQ(ForwarderProcess::Get(stats, "kernel.accepted"), 1u);
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.accepted"), 0u);
  EXPECT_EQ(fwd.Stop(), 0) << fwd.output();
}

// Generic mode on veth keeps the peer's TSO: 64 KiB packets would reach a 4 KiB frame.
TEST_F(LinkFitTest, GenericModeOnVethIsRefused) {
  Build(1500);
  const RunResult r = RunXdpPath({"--generic"});
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find(topo_->client_side_if() + ": XDP runs in generic mode"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("TSO"), std::string::npos) << r.output;
  EXPECT_FALSE(XdpAttached(topo_->client_side_if()));
}

// The largest MTU native XDP on veth takes is served by the fast path, both ways.
TEST_F(LinkFitTest, LargestVethMtuIsServedByTheFastPath) {
  Build(3506);
  ForwarderProcess fwd("xdp", listen(), backend());
  EXPECT_NE(fwd.output().find("XDP native"), std::string::npos) << fwd.output();
  ExpectEchoBothWays();
  const auto stats = fwd.Stats();
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.accepted"), 1u);
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.xsk_rx_dropped"), 0u);
  EXPECT_EQ(fwd.Stop(), 0) << fwd.output();
}

}  // namespace
}  // namespace xdpfwd::test
