// What the fast path refuses at start because its frames cannot hold the interface's packets
// (forwarder/link_fit.h), through the real xdpfwd binary: --path xdp exits with the fix,
// --path auto serves the rule on the kernel path, and the largest MTU it accepts relays. And
// what multi-buffer RX makes possible: generic mode on veth, where the peers keep their TSO and
// 64 KiB segments arrive as descriptor chains.
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
  // `bytes` each way at once through the forwarder, echoed by the backend; hashes must match.
  void ExpectEchoBothWays(uint64_t bytes = 4ull << 20) {
    Backend echo(TcpListen(topo_->server_ns(), topo_->server_addr(), kPort), EchoUntilEofOrReset);
    UniqueFd client = TcpConnect(topo_->client_ns(), topo_->client_gw(), kPort);
    BoundWaits(client.get());
    auto echoed = std::async(std::launch::async, [&] { return ReceiveAll(client.get()); });
    const StreamStats sent = SendPattern(client.get(), 12, bytes);
    const StreamStats got = echoed.get();
    EXPECT_EQ(got.bytes, bytes);
    EXPECT_EQ(got.hash, sent.hash);
    EXPECT_TRUE(echo.WaitServed(1));
  }

  std::unique_ptr<Topology> topo_;
};

// Without multi-buffer one packet must fit one frame: MTU 9000 is refused with the fix.
TEST_F(LinkFitTest, JumboMtuWithoutMultiBufferRefusesTheXdpPathWithTheFix) {
  Build(9000);
  const RunResult r = RunXdpPath({"--tune", "multi-buffer=off"});
  EXPECT_EQ(r.status, 1) << r.output;
  for (const std::string& part :
       {topo_->client_side_if() + ": MTU 9000 is above the 3506 the fast path can receive",
        std::string("mtu 3506"), std::string("--path kernel")}) {
    EXPECT_NE(r.output.find(part), std::string::npos) << part << " missing in:\n" << r.output;
  }
  EXPECT_EQ(r.output.find("ready"), std::string::npos) << r.output;
  EXPECT_FALSE(XdpAttached(topo_->client_side_if())) << "the refused fast path left XDP behind";
  EXPECT_FALSE(XdpAttached(topo_->server_side_if()));
}

TEST_F(LinkFitTest, JumboMtuWithoutMultiBufferInAutoModeIsServedByTheKernelPath) {
  Build(9000);
  ForwarderProcess fwd("auto", listen(), backend(), {"--tune", "multi-buffer=off"});
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

// MTU 9000 through the fast path, in both modes: 9000-byte packets arrive as chains of three
// frames (native) or inside TSO chains (generic). lwIP's 8960-byte segments leave as GSO
// packets through the packet socket (the default on veth), or with --tune tx=af-xdp as chains of
// three TX frames. Before multi-buffer TX this MTU was refused (and before the refusal, it said
// ready and moved no byte).
TEST_F(LinkFitTest, JumboMtuIsServedByTheFastPathBothWays) {
  Build(9000);
  for (const std::vector<std::string>& mode :
       {std::vector<std::string>{}, std::vector<std::string>{"--native"},
        std::vector<std::string>{"--tune", "tx=af-xdp"},
        std::vector<std::string>{"--native", "--tune", "tx=af-xdp"}}) {
    const bool native = !mode.empty() && mode[0] == "--native";
    const bool af_xdp_tx = mode.size() >= 2 && mode[mode.size() - 1] == "tx=af-xdp";
    ForwarderProcess fwd("xdp", listen(), backend(), mode);
    EXPECT_NE(fwd.output().find(native ? "XDP native" : "XDP generic"), std::string::npos)
        << fwd.output();
    ExpectEchoBothWays(16ull << 20);
    const auto stats = fwd.Stats();
    EXPECT_EQ(ForwarderProcess::Get(stats, "fast.accepted"), 1u);
    EXPECT_EQ(ForwarderProcess::Get(stats, "fast.xsk_rx_dropped"), 0u);
    EXPECT_GT(ForwarderProcess::Get(stats, "fast.rx_chains"), 0u);
    if (af_xdp_tx) {
      EXPECT_GT(ForwarderProcess::Get(stats, "fast.tx_chains"), 1000u)
          << "16 MiB in 8960-byte segments";
    } else {
      EXPECT_GT(ForwarderProcess::Get(stats, "fast.tx_socket_gso"), 0u);
      EXPECT_EQ(ForwarderProcess::Get(stats, "fast.tx_socket_dropped"), 0u);
    }
    EXPECT_EQ(fwd.Stop(), 0) << fwd.output();
  }
}

// Generic mode on veth keeps the peers' TSO: 64 KiB segments arrive as descriptor chains and
// enter lwIP whole. Before multi-buffer RX, --generic was refused here (and, before that
// refusal, hung after the first segment that did not fit a frame).
TEST_F(LinkFitTest, GenericModeOnVethRelaysTsoSegmentsWhole) {
  Build(1500);
  for (const std::string& ns : {topo_->client_ns(), topo_->server_ns()}) {
    EXPECT_NE(RunCommand(ns, "ethtool -k eth0").output.find("tcp-segmentation-offload: on"),
              std::string::npos)
        << ns << ": the test needs the peer's TSO on";
  }
  ForwarderProcess fwd("xdp", listen(), backend(), {"--generic"});
  EXPECT_NE(fwd.output().find("XDP generic (generic mode requested)"), std::string::npos)
      << fwd.output();
  EXPECT_NE(fwd.output().find("multi-buffer RX"), std::string::npos) << fwd.output();
  ExpectEchoBothWays(32ull << 20);
  const auto stats = fwd.Stats();
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.accepted"), 1u);
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.xsk_rx_dropped"), 0u);
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.rx_chains_dropped"), 0u);
  // Both legs' senders segment nothing themselves: most bytes come in chains.
  EXPECT_GT(ForwarderProcess::Get(stats, "fast.rx_chains"), 100u);
  EXPECT_GT(ForwarderProcess::Get(stats, "fast.rx_frames"),
            ForwarderProcess::Get(stats, "fast.rx_packets"));
  EXPECT_EQ(fwd.Stop(), 0) << fwd.output();
}

// With neither --generic nor --native, veth gets generic mode, and says why; --native keeps
// the old choice, and relays too.
TEST_F(LinkFitTest, VethDefaultsToGenericAndNativeStaysAvailable) {
  Build(1500);
  {
    ForwarderProcess fwd("xdp", listen(), backend());
    EXPECT_NE(fwd.output().find("XDP generic (chosen on veth: the peer keeps its TSO"),
              std::string::npos)
        << fwd.output();
    ExpectEchoBothWays();
    EXPECT_EQ(fwd.Stop(), 0) << fwd.output();
  }
  ForwarderProcess fwd("xdp", listen(), backend(), {"--native"});
  EXPECT_NE(fwd.output().find("XDP native,"), std::string::npos) << fwd.output();
  ExpectEchoBothWays();
  const auto stats = fwd.Stats();
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.xsk_rx_dropped"), 0u);
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.rx_chains"), 0u) << "native veth strips TSO";
  EXPECT_EQ(fwd.Stop(), 0) << fwd.output();
}

// Generic mode on veth without chains would meet 64 KiB TSO segments it cannot take: refused.
TEST_F(LinkFitTest, GenericModeOnVethWithoutMultiBufferIsRefused) {
  Build(1500);
  const RunResult r = RunXdpPath({"--generic", "--tune", "multi-buffer=off"});
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find(topo_->client_side_if() + ": XDP runs in generic mode"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("keeps its TSO"), std::string::npos) << r.output;
  EXPECT_FALSE(XdpAttached(topo_->client_side_if()));
}

}  // namespace
}  // namespace xdpfwd::test
