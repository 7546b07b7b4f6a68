// lwIP built dual-stack (issue #31): TCP over IPv6 on the in-memory wire, beside the IPv4 the
// other tests run. The segment size follows the MTU less IPv6's 40-byte header, every segment's
// checksum covers RFC 8200's pseudo-header (checked here with os/inet_checksum.h, not lwIP's own
// code), a segment whose checksum is wrong is dropped, and IPv6 pcbs spread over the 4-tuple
// hash however alike their addresses (lwIP patch 0038).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "os/inet_checksum.h"
#include "tests/unit/lwip_wire_fixture.h"

extern "C" {
#include "lwip/ip6_addr.h"
}

namespace xdpfwd::test::wire {
namespace {

constexpr uint32_t kIpv6Mss = 1500 - 40 - 20;  // the wire's MTU less IPv6 and TCP headers

// The MSS option of a SYN's TCP header (IPv6's fixed header first); 0 if it has none.
uint32_t MssOption(const std::vector<uint8_t>& ip) {
  const uint8_t* tcp = ip.data() + 40;
  const size_t end = (tcp[12] >> 4) * 4u;
  for (size_t at = 20; at + 1 < end;) {
    if (tcp[at] == 0) break;
    if (tcp[at] == 1) {
      ++at;
      continue;
    }
    if (tcp[at] == 2 && tcp[at + 1] == 4 && at + 4 <= end) return tcp[at + 2] << 8 | tcp[at + 3];
    at += std::max<size_t>(tcp[at + 1], 2);
  }
  return 0;
}

class LwipIpv6Test : public LwipWireTest {
 protected:
  void SetUp() override {
    LwipWireTest::SetUp();
    listener6_ = LwipWire::Listen(LwipWire::Addr6B(), kServerPort, this, Accept);
    ASSERT_NE(listener6_, nullptr);
  }
  void TearDown() override {
    if (listener6_ != nullptr) {
      EXPECT_EQ(tcp_close(listener6_), ERR_OK);
    }
    LwipWireTest::TearDown();
  }

  // Client fd00::1 port kClientPort -> fd00::2 port kServerPort, connected.
  void Connect6() {
    tcp_pcb* pcb = tcp_new_ip_type(IPADDR_TYPE_V6);
    ASSERT_NE(pcb, nullptr);
    const ip_addr_t a = LwipWire::Addr6A(), b = LwipWire::Addr6B();
    ASSERT_EQ(tcp_bind(pcb, &a, kClientPort), ERR_OK);
    Attach(&client_, pcb);
    ASSERT_EQ(tcp_connect(pcb, &b, kServerPort, Connected), ERR_OK);
    ASSERT_TRUE(RunUntil([&] { return client_.connected && server_.pcb != nullptr; }, 1000));
  }

  tcp_pcb* listener6_ = nullptr;
};

TEST_F(LwipIpv6Test, TcpCarriesBothWaysWithTheMssOfTheMtuAndPseudoHeaderChecksums) {
  std::vector<WirePacket> sent;
  wire_.SetTap([&](const WirePacket& p) { sent.push_back(p); });
  struct TapOff {
    LwipWire& wire;
    ~TapOff() { wire.SetTap({}); }
  } tap_off{wire_};
  ASSERT_NO_FATAL_FAILURE(Connect6());
  ASSERT_NO_FATAL_FAILURE(Transfer(client_, server_, 300'000));
  ASSERT_NO_FATAL_FAILURE(Transfer(server_, client_, 200'000));
  EXPECT_EQ(server_.received, Payload(300'000));
  EXPECT_EQ(client_.received, Payload(200'000));
  EXPECT_EQ(client_.pcb->mss, kIpv6Mss);
  EXPECT_EQ(server_.pcb->mss, kIpv6Mss);

  size_t syns = 0, full = 0;
  for (const WirePacket& p : sent) {
    ASSERT_TRUE(p.tcp.ipv6) << "an IPv6 connection sent an IPv4 packet";
    ASSERT_EQ(p.bytes[0] >> 4, 6);
    const uint8_t* ip = p.bytes.data();
    const auto tcp_len = static_cast<uint32_t>(p.bytes.size() - 40);
    EXPECT_EQ(InetChecksum(ip + 40, tcp_len, Ipv6PseudoHeaderSum(ip, 6, tcp_len)), 0)
        << "seq " << p.tcp.seq << ": the checksum does not cover the IPv6 pseudo-header";
    if (p.tcp.flags & TCP_SYN) {
      ++syns;
      EXPECT_EQ(MssOption(p.bytes), kIpv6Mss) << "the SYN's MSS is the MTU less 60 bytes";
    }
    EXPECT_LE(p.tcp.payload_len, kIpv6Mss);
    if (p.tcp.payload_len == kIpv6Mss) ++full;
  }
  EXPECT_EQ(syns, 2u);
  EXPECT_GT(full, 300u) << "bulk data leaves in full segments of the IPv6 MSS";
}

// The client's first data segment is lost; two corrupt copies of it arrive in its place (a
// payload bit flipped; the source address changed, so the pseudo-header no longer matches).
// Both are dropped for their checksum and none of their bytes is taken; the retransmission is.
TEST_F(LwipIpv6Test, SegmentsWhoseChecksumIsWrongAreDropped) {
  ASSERT_NO_FATAL_FAILURE(Connect6());
  std::optional<WirePacket> lost;
  wire_.SetFilter([&](const WirePacket& p) {
    if (lost || p.tcp.payload_len == 0) return WireVerdict::kDeliver;
    lost = p;
    return WireVerdict::kDrop;
  });
  client_.outgoing = Payload(1000);
  Feed(client_);
  wire_.Pump();
  wire_.SetFilter(nullptr);
  ASSERT_TRUE(lost.has_value());
  ASSERT_EQ(lost->tcp.payload_len, 1000u);
  const uint32_t chkerr = lwip_stats.tcp.chkerr;
  WirePacket flipped = *lost;
  flipped.bytes.back() ^= 0x40;
  wire_.Replay(flipped);
  WirePacket spoofed = *lost;
  spoofed.bytes[23] ^= 0x01;  // the source address's last byte: fd00::1 -> fd00::
  wire_.Replay(spoofed);
  wire_.Pump();
  EXPECT_EQ(lwip_stats.tcp.chkerr, chkerr + 2);
  EXPECT_TRUE(server_.received.empty()) << "a byte of a corrupt segment was taken";
  ASSERT_TRUE(RunUntil([&] { return server_.received.size() == 1000; }, 500));
  EXPECT_EQ(server_.received, Payload(1000));
}

TEST_F(LwipIpv6Test, AnIpv4ConnectionRunsBesideItOnTheSameNetifs) {
  ASSERT_NO_FATAL_FAILURE(Connect6());
  Peer v6_client = client_, v6_server = server_;
  tcp_arg(v6_client.pcb, &v6_client);
  tcp_arg(v6_server.pcb, &v6_server);
  client_ = {};
  server_ = {};
  ASSERT_NO_FATAL_FAILURE(Connect());  // 10.0.0.1 -> 10.0.0.2, same ports
  ASSERT_NO_FATAL_FAILURE(Transfer(client_, server_, 50'000));
  ASSERT_NO_FATAL_FAILURE(Transfer(v6_client, v6_server, 50'000));
  EXPECT_EQ(lwip_pcb::ToInAddr(server_.pcb->remote_ip).s_addr, LwipWire::InAddrA().s_addr);
  EXPECT_TRUE(IP_IS_V6(&v6_server.pcb->remote_ip));
  EXPECT_EQ(client_.pcb->mss, kMss) << "IPv4 keeps its 1460";
  for (Peer* p : {&v6_client, &v6_server}) {
    tcp_arg(p->pcb, nullptr);
    tcp_err(p->pcb, nullptr);
    tcp_abort(p->pcb);
  }
}

// Patch 0038: 512 IPv6 connections from peers of one /64 that differ only in their interface
// identifiers, all to one port: before, the hash took each address's first word (the prefix,
// the same for all) and put every pcb in one chain.
TEST_F(LwipIpv6Test, PeersOfOnePrefixSpreadOverThePcbHash) {
  constexpr int kPeers = 512;
  std::vector<tcp_pcb*> pcbs;
  const ip_addr_t local = LwipWire::Addr6B();
  for (int i = 0; i < kPeers; ++i) {
    tcp_pcb* pcb = tcp_new_ip_type(IPADDR_TYPE_V6);
    ASSERT_NE(pcb, nullptr);
    ip_addr_copy(pcb->local_ip, local);
    IP_ADDR6_HOST(&pcb->remote_ip, 0x20010db8, 0, 0x02000000u + static_cast<uint32_t>(i) * 7919,
                  0x00000100u + static_cast<uint32_t>(i));
    pcb->local_port = kServerPort;
    pcb->remote_port = 40000;
    pcb->state = ESTABLISHED;
    TCP_REG_ACTIVE(pcb);
    pcbs.push_back(pcb);
  }
  size_t longest = 0;
  for (const tcp_pcb* pcb : pcbs) {
    size_t chain = 1;
    for (const tcp_pcb* q = pcb->hash_next; q != nullptr; q = q->hash_next) ++chain;
    longest = std::max(longest, chain);
  }
  for (tcp_pcb* pcb : pcbs) {
    ASSERT_EQ(
        tcp_pcb_hash_lookup(0, &pcb->local_ip, pcb->local_port, &pcb->remote_ip, pcb->remote_port),
        pcb);
  }
  for (tcp_pcb* pcb : pcbs) {
    TCP_RMV_ACTIVE(pcb);
    pcb->state = CLOSED;
    EXPECT_EQ(tcp_close(pcb), ERR_OK);  // on no list now: freed
  }
  // 512 pcbs in 2^18 buckets: a chain of 4 is already unlikely; one bucket for all is the bug.
  EXPECT_LE(longest, 4u);
}

}  // namespace
}  // namespace xdpfwd::test::wire
