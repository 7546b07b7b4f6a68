// The AF_XDP port on a real veth, both directions: frames built here leave through the TX ring
// and reach the client namespace's kernel, whose answers come back through the steering
// program into the RX ring. Every UMEM frame is accounted for at the end.
#include <gtest/gtest.h>
#include <net/if.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

#include "stack/neighbor.h"
#include "stack/xsk_port.h"
#include "tests/support/netns_topology.h"
#include "tests/support/packet_builder.h"
#include "tests/support/tcp.h"
#include "xdp/steer.h"

namespace xdpfwd::test {
namespace {

using namespace std::chrono_literals;

// An interface's MAC as the project reads it (stack/neighbor), from inside `ns`.
Mac MacOf(const std::string& ns, const std::string& ifname) {
  Mac mac{};
  RunInNamespace(ns, [&] {
    auto found = InterfaceMac(static_cast<int>(if_nametoindex(ifname.c_str())));
    ASSERT_TRUE(found) << found.error().message();
    mac = *found;
  });
  return mac;
}

// Datagrams the namespace's kernel received for closed UDP ports (Udp NoPorts in
// /proc/net/snmp): counts exactly our test frames, unlike the link counters, which also see
// ARP and IPv6 neighbour discovery.
uint64_t UdpNoPorts(const std::string& ns) {
  std::istringstream snmp(RunCommand(ns, "cat /proc/net/snmp").output);
  std::string header, values;
  while (std::getline(snmp, header) && std::getline(snmp, values)) {
    if (header.rfind("Udp:", 0) != 0) continue;
    std::istringstream names(header), nums(values);
    std::string name, num;
    while (names >> name && nums >> num) {
      if (name == "NoPorts") return std::stoull(num);
    }
  }
  ADD_FAILURE() << "no Udp NoPorts in /proc/net/snmp";
  return 0;
}

// A UDP header (to the discard port, closed in the namespace) and 92 bytes of payload; the
// checksum is left 0, which IPv4 UDP allows.
std::vector<uint8_t> UdpToPort9() {
  std::vector<uint8_t> udp(100, 0xab);
  const uint8_t header[8] = {0x9c, 0x40, 0x00, 0x09, 0x00, 100, 0x00, 0x00};
  std::memcpy(udp.data(), header, sizeof(header));
  return udp;
}

class XskPortTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
    auto prog = SteerProgram::Attach(topo_.client_side_if());
    ASSERT_TRUE(prog) << prog.error().message();
    prog_ = std::move(*prog);
    XskPortConfig cfg;
    cfg.ifname = topo_.client_side_if();
    cfg.frame_count = 4096;
    cfg.ring_size = 1024;
    auto port = XskPort::Open(cfg);
    ASSERT_TRUE(port) << port.error().message();
    port_ = std::move(*port);
    ASSERT_TRUE(prog_->BindQueue(0, port_->fd()));
    root_mac_ = MacOf("", topo_.client_side_if());
    client_mac_ = MacOf(topo_.client_ns(), Topology::kNsIf);
  }

  void TearDown() override {
    if (!port_) return;
    EXPECT_TRUE(port_->DrainTx());
    const FrameAccount f = port_->frames();
    EXPECT_EQ(f.held, 0u) << "frames still held by the test";
    EXPECT_EQ(f.in_tx, 0u);
    EXPECT_EQ(f.in_pool + f.in_fill + f.in_tx + f.held, f.total) << "a frame went missing";
  }

  void Send(const std::vector<uint8_t>& frame) {
    auto tx = port_->AllocTx();
    ASSERT_TRUE(tx.has_value());
    ASSERT_LE(frame.size(), tx->capacity);
    std::memcpy(tx->data, frame.data(), frame.size());
    port_->QueueTx(tx->addr, static_cast<uint32_t>(frame.size()));
  }

  Topology topo_;
  std::unique_ptr<SteerProgram> prog_;
  std::unique_ptr<XskPort> port_;
  Mac root_mac_{}, client_mac_{};
};

TEST_F(XskPortTest, SynOutSynAckBack) {
  UniqueFd listener = TcpListen(topo_.client_ns(), topo_.client_addr());
  const uint16_t port = LocalPort(listener.get());
  constexpr uint16_t kLocalPort = 61000;
  ASSERT_TRUE(prog_->AddFlow({topo_.client_addr(), topo_.client_gw(), port, kLocalPort}, 0, 0));

  const std::string gw = ToString(topo_.client_gw()), client = ToString(topo_.client_addr());
  Send(Packet()
           .Eth(0x0800, root_mac_, client_mac_)
           .IPv4(gw, client)
           .Tcp(kLocalPort, port, kSyn, 1000)
           .Build());
  port_->Flush();

  bool saw_syn_ack = false;
  std::array<RxFrame, 64> rx{};
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (!saw_syn_ack && std::chrono::steady_clock::now() < deadline) {
    const uint32_t n = port_->Receive(rx);
    for (uint32_t i = 0; i < n; ++i) {
      const uint8_t* f = rx[i].data;
      if (rx[i].len >= 54 && f[12] == 0x08 && f[13] == 0x00 && f[23] == 6) {
        const uint8_t* tcp = f + 14 + (f[14] & 0x0f) * 4;
        const uint32_t ack =
            static_cast<uint32_t>(tcp[8] << 24 | tcp[9] << 16 | tcp[10] << 8 | tcp[11]);
        if ((tcp[0] << 8 | tcp[1]) == port && (tcp[2] << 8 | tcp[3]) == kLocalPort &&
            tcp[13] == (kSyn | kAck) && ack == 1001) {
          saw_syn_ack = true;
        }
      }
      port_->Release(rx[i].addr);
    }
    port_->Flush();
    if (n == 0) std::this_thread::sleep_for(1ms);
  }
  EXPECT_TRUE(saw_syn_ack) << "the kernel's SYN-ACK never came back through the RX ring";

  // Reset the half-open connection we made in the client namespace.
  Send(Packet()
           .Eth(0x0800, root_mac_, client_mac_)
           .IPv4(gw, client)
           .Tcp(kLocalPort, port, kRst, 1001)
           .Build());
  port_->Flush();
  const XskStats s = port_->stats();
  EXPECT_EQ(s.tx_packets, 2u);
  EXPECT_GE(s.rx_packets, 1u);
  EXPECT_GE(s.tx_kicks, 2u) << "copy mode needs a kick per flush";
  EXPECT_FALSE(port_->zero_copy()) << "veth has no zero-copy AF_XDP";
}

TEST_F(XskPortTest, BatchedTxDeliversEveryFrameWithBoundedKicks) {
  const std::string gw = ToString(topo_.client_gw()), client = ToString(topo_.client_addr());
  const auto frame = Packet()
                         .Eth(0x0800, root_mac_, client_mac_)
                         .IPv4(gw, client, 17)
                         .Payload(UdpToPort9())
                         .Build();
  const uint64_t before = UdpNoPorts(topo_.client_ns());
  constexpr uint32_t kBatch = 32, kBatches = 300;
  for (uint32_t b = 0; b < kBatches; ++b) {
    for (uint32_t i = 0; i < kBatch; ++i) Send(frame);
    port_->Flush();
  }
  ASSERT_TRUE(port_->DrainTx());
  const XskStats s = port_->stats();
  EXPECT_EQ(s.tx_packets, uint64_t{kBatch} * kBatches);
  EXPECT_EQ(s.kernel_tx_invalid, 0u);
  // Frames reach the peer in its softirq: poll its counter, bounded.
  uint64_t delivered = 0;
  for (int i = 0; i < 200; ++i) {
    delivered = UdpNoPorts(topo_.client_ns()) - before;
    if (delivered >= uint64_t{kBatch} * kBatches) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(delivered, uint64_t{kBatch} * kBatches);
  // One kick per flush of 32, plus the occasional retry: far below one syscall per frame.
  std::printf("[ info ] %u frames in %u flushes: %llu kicks, %llu retries\n", kBatch * kBatches,
              kBatches, static_cast<unsigned long long>(s.tx_kicks),
              static_cast<unsigned long long>(s.tx_kick_retries));
  EXPECT_LE(s.tx_kicks, uint64_t{kBatches} * 2);
}

}  // namespace
}  // namespace xdpfwd::test
