// TX checksum offload through AF_XDP TX metadata, end to end through the real xdpfwd binary.
// The root-side veths have TX checksumming off, so the kernel completes each offloaded
// checksum in software on the way out (validate_xmit_skb) and the receiving namespaces verify
// every segment: a wrong pseudo-header sum or checksum offset gets segments dropped (counted
// in InCsumErrors) and the echo stalls. --tune tx-checksum=software is the same run with lwIP's
// checksums. --tune tx=packet (the default on veth) sends GSO packets with the checksum left to
// the kernel: with TX checksumming off the device has no TSO either, so the kernel cuts each
// packet and checksums every segment in software.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/backend.h"
#include "tests/support/forwarder_process.h"
#include "tests/support/netns_topology.h"
#include "tests/support/tcp.h"

namespace xdpfwd::test {
namespace {

constexpr uint16_t kPort = 9000;
constexpr uint64_t kBytes = 8ull << 20;

std::string Addr(in_addr a, uint16_t port) { return ToString(a) + ":" + std::to_string(port); }

// The namespace's Tcp InCsumErrors (/proc/net/snmp: a header line, then a value line).
uint64_t TcpChecksumErrors(const Topology& topo, const std::string& ns) {
  std::istringstream lines(topo.Run(ns, "cat /proc/net/snmp").output);
  std::string header, values;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("Tcp:", 0) != 0) continue;
    if (header.empty()) {
      header = line;
    } else {
      values = line;
    }
  }
  std::istringstream names(header), numbers(values);
  for (std::string name, number; names >> name && numbers >> number;) {
    if (name == "InCsumErrors") return std::stoull(number);
  }
  ADD_FAILURE() << "no Tcp InCsumErrors in /proc/net/snmp of " << ns;
  return 0;
}

class TxChecksumTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
    for (const std::string& dev : {topo_.client_side_if(), topo_.server_side_if()}) {
      const CommandResult r = topo_.Run("", "ethtool -K " + dev + " tx off");
      ASSERT_EQ(r.status, 0) << r.output;
    }
  }
  bool offload() const { return GetParam() == "offload"; }
  bool packet() const { return GetParam() == "packet"; }

  Topology topo_;
};

TEST_P(TxChecksumTest, EveryByteCrossesAndTheReceiversAcceptEveryChecksum) {
  Backend echo(TcpListen(topo_.server_ns(), topo_.server_addr(), kPort), EchoUntilEofOrReset);
  const std::vector<std::string> args =
      packet()
          ? std::vector<std::string>{"--tune", "tx=packet"}
          : std::vector<std::string>{"--tune", "tx=af-xdp", "--tune", "tx-checksum=" + GetParam()};
  ForwarderProcess fwd("xdp", Addr(topo_.client_gw(), kPort), Addr(topo_.server_addr(), kPort),
                       args);
  const std::string expected = packet()    ? "TX through a packet socket with GSO"
                               : offload() ? "TX checksum offload"
                                           : "TX checksum software";
  EXPECT_NE(fwd.output().find(expected), std::string::npos) << fwd.output();
  {
    UniqueFd client = TcpConnect(topo_.client_ns(), topo_.client_gw(), kPort);
    BoundWaits(client.get());  // a dropped segment stalls the stream: fail, not hang
    auto echoed = std::async(std::launch::async, [&] { return ReceiveAll(client.get()); });
    const StreamStats sent = SendPattern(client.get(), 21, kBytes);
    const StreamStats got = echoed.get();
    EXPECT_EQ(got.bytes, kBytes);
    EXPECT_EQ(got.hash, sent.hash);
  }
  EXPECT_TRUE(echo.WaitServed(1));
  const auto stats = fwd.Stats();
  // Each MiB crosses each leg in at least 700 segments (MSS 1448).
  const uint64_t offloaded = ForwarderProcess::Get(stats, "fast.tx_checksum_offloaded");
  if (offload()) {
    EXPECT_GT(offloaded, 2 * 8 * 700u);
  } else if (packet()) {
    EXPECT_GT(ForwarderProcess::Get(stats, "fast.tx_socket_segments"), 2 * 8 * 700u);
    EXPECT_GT(ForwarderProcess::Get(stats, "fast.tx_socket_gso"), 0u);
    EXPECT_EQ(ForwarderProcess::Get(stats, "fast.tx_socket_dropped"), 0u);
    // Batches of single segments (other than bare ACKs alone) leave through the AF_XDP port,
    // checksums through TX metadata.
    EXPECT_EQ(offloaded, ForwarderProcess::Get(stats, "fast.tx_singles_af_xdp"));
  } else {
    EXPECT_EQ(offloaded, 0u);
  }
  EXPECT_EQ(TcpChecksumErrors(topo_, topo_.client_ns()), 0u);
  EXPECT_EQ(TcpChecksumErrors(topo_, topo_.server_ns()), 0u);
  // A wrong checksum loses every segment it is in, each counted in InCsumErrors above and
  // resent. A segment or two resent with no checksum error is not this test's subject: the
  // full test run of 2026-11-28 (2 cores, another test beside this one) resent one, with
  // InCsumErrors 0 in both namespaces; its cause was not recorded. The counters are printed
  // when there are more.
  const uint64_t retransmits = ForwarderProcess::Get(stats, "fast.retransmits");
  EXPECT_LE(retransmits, 2u) << [&] {
    std::string nonzero;
    for (const auto& [name, value] : stats) {
      if (value != 0) nonzero += " " + name + "=" + std::to_string(value);
    }
    return nonzero;
  }();
  EXPECT_EQ(fwd.Stop(), 0) << fwd.output();
}

INSTANTIATE_TEST_SUITE_P(Modes, TxChecksumTest, ::testing::Values("offload", "software", "packet"),
                         [](const auto& p) { return p.param; });

}  // namespace
}  // namespace xdpfwd::test
