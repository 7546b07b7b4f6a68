// TxBatch (stack/packet_tx.h): which of lwIP's packets become one GSO packet, and the headers
// the kernel gets for it. Segments of one flow in sequence merge, full ones first; anything
// else (another flow, a gap, a short segment, a FIN, other options, a bare ACK, a SYN) starts
// a packet of its own, and the merged packet's headers are what Linux's TCP would have built.
#include "stack/packet_tx.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "stack/worker.h"

extern "C" {
#include "lwip/pbuf.h"
#include "os/inet_checksum.h"
}

namespace xdpfwd {
namespace {

constexpr uint8_t kAck = 0x10, kPsh = 0x08, kFin = 0x01, kSyn = 0x02;
constexpr uint32_t kMss = 1448;
constexpr uint8_t kEth[14] = {2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00};

struct Segment {
  uint32_t seq = 1000;
  uint32_t ack = 5000;
  uint16_t window = 100;
  uint8_t flags = kAck;
  uint32_t payload = kMss;
  uint16_t sport = 40000;
  std::vector<uint8_t> options;  // a multiple of 4 bytes
  uint8_t fill = 0;              // payload byte i is fill + i
  // The payload in the headers' pbuf (0, as lwIP's oversized PBUF_RAM) or in this many pbufs
  // chained behind it.
  uint32_t payload_pbufs = 1;
  bool ipv6 = false;  // fd00::1 -> fd00::<peer> instead of 10.0.0.1 -> 10.0.0.2
  uint8_t peer = 2;
};

uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t Get32(const uint8_t* p) { return uint32_t{Get16(p)} << 16 | Get16(p + 2); }

// lwIP's packet as it reaches the netif: a pbuf chain from the IP header on, headers in the
// first pbuf and the payload behind them (as lwIP chains a segment's data behind its headers).
pbuf* Build(const Segment& s) {
  const uint32_t tcp_len = 20 + static_cast<uint32_t>(s.options.size());
  const uint32_t ip_len = s.ipv6 ? 40 : 20;
  std::vector<uint8_t> h(ip_len + tcp_len, 0);
  if (s.ipv6) {
    h[0] = 0x60;
    const uint16_t plen = static_cast<uint16_t>(tcp_len + s.payload);
    h[4] = static_cast<uint8_t>(plen >> 8);
    h[5] = static_cast<uint8_t>(plen);
    h[6] = IPPROTO_TCP;
    h[7] = 64;
    h[8] = h[24] = 0xfd;
    h[23] = 1;
    h[39] = s.peer;
  } else {
    h[0] = 0x45;
    const uint16_t tot = static_cast<uint16_t>(h.size() + s.payload);
    h[2] = static_cast<uint8_t>(tot >> 8);
    h[3] = static_cast<uint8_t>(tot);
    h[8] = 64;
    h[9] = IPPROTO_TCP;
    const uint8_t addrs[8] = {10, 0, 0, 1, 10, 0, 0, s.peer};
    std::memcpy(&h[12], addrs, 8);
  }
  uint8_t* t = &h[ip_len];
  t[0] = static_cast<uint8_t>(s.sport >> 8);
  t[1] = static_cast<uint8_t>(s.sport);
  t[2] = 0x23;
  t[3] = 0x28;
  for (int i = 0; i < 4; ++i) t[4 + i] = static_cast<uint8_t>(s.seq >> (24 - 8 * i));
  for (int i = 0; i < 4; ++i) t[8 + i] = static_cast<uint8_t>(s.ack >> (24 - 8 * i));
  t[12] = static_cast<uint8_t>((tcp_len / 4) << 4);
  t[13] = s.flags;
  t[14] = static_cast<uint8_t>(s.window >> 8);
  t[15] = static_cast<uint8_t>(s.window);
  if (!s.options.empty()) std::memcpy(t + 20, s.options.data(), s.options.size());
  std::vector<uint8_t> data(s.payload);
  for (uint32_t i = 0; i < s.payload; ++i) data[i] = static_cast<uint8_t>(s.fill + i);
  if (s.payload_pbufs == 0) h.insert(h.end(), data.begin(), data.end());
  pbuf* head = pbuf_alloc(PBUF_RAW, static_cast<u16_t>(h.size()), PBUF_RAM);
  EXPECT_NE(head, nullptr);
  pbuf_take(head, h.data(), static_cast<u16_t>(h.size()));
  if (s.payload == 0 || s.payload_pbufs == 0) return head;
  uint32_t at = 0;
  for (uint32_t k = 0; k < s.payload_pbufs; ++k) {
    const uint32_t n = k + 1 == s.payload_pbufs ? s.payload - at : s.payload / s.payload_pbufs;
    pbuf* body = pbuf_alloc(PBUF_RAW, static_cast<u16_t>(n), PBUF_RAM);
    EXPECT_NE(body, nullptr);
    pbuf_take(body, data.data() + at, static_cast<u16_t>(n));
    pbuf_cat(head, body);
    at += n;
  }
  return head;
}

class TxBatchTest : public ::testing::Test {
 protected:
  void SetUp() override { InitLwipOnce(); }
  bool Add(const Segment& s) {
    pbuf* p = Build(s);
    const bool added = batch_.Add(kEth, p);
    pbuf_free(p);
    return added;
  }
  // Segments `count` of kMss bytes from `seq` on, each with payload bytes from `fill` on.
  void AddRun(uint32_t count, Segment s) {
    for (uint32_t i = 0; i < count; ++i) {
      ASSERT_TRUE(Add(s));
      s.seq += s.payload;
      s.fill = static_cast<uint8_t>(s.fill + s.payload);
    }
  }
  TxBatch batch_;
};

TEST_F(TxBatchTest, ConsecutiveSegmentsOfAFlowBecomeOneGsoPacketWithLinuxsHeaders) {
  Segment s;
  AddRun(3, s);
  Segment last = s;
  last.seq = s.seq + 3 * kMss;
  last.fill = static_cast<uint8_t>(3 * kMss);
  last.payload = 700;
  last.flags = kAck | kPsh;
  last.ack = 6000;
  last.window = 222;
  ASSERT_TRUE(Add(last));
  batch_.Seal();
  ASSERT_EQ(batch_.size(), 1u);
  EXPECT_EQ(batch_.segments(0), 4u);
  const std::vector<uint8_t> f = batch_.Frame(0);
  const uint32_t payload = 3 * kMss + 700;
  ASSERT_EQ(f.size(), 14u + 40 + payload);
  EXPECT_EQ(std::memcmp(f.data(), kEth, 14), 0);
  const uint8_t* ip = f.data() + 14;
  EXPECT_EQ(Get16(ip + 2), 40 + payload) << "the IP length of the whole packet";
  uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += Get16(ip + i);
  EXPECT_EQ(InetFold(sum), 0xffff) << "a valid IP header checksum";
  const uint8_t* tcp = ip + 20;
  EXPECT_EQ(Get32(tcp + 4), 1000u) << "the first segment's sequence number";
  EXPECT_EQ(Get32(tcp + 8), 6000u) << "the newest acknowledgement";
  EXPECT_EQ(Get16(tcp + 14), 222u) << "the newest window";
  EXPECT_EQ(tcp[13], kAck | kPsh);
  uint32_t pseudo = IPPROTO_TCP + 20 + payload;
  for (int i = 12; i < 20; i += 2) pseudo += Get16(ip + i);
  EXPECT_EQ(Get16(tcp + 16), InetFold(pseudo)) << "the pseudo-header sum over the whole TCP length";
  for (uint32_t i = 0; i < payload; ++i) {
    ASSERT_EQ(tcp[20 + i], static_cast<uint8_t>(i)) << "payload byte " << i;
  }
  const VnetHeader& v = batch_.vnet(0);
  EXPECT_EQ(v.flags, VnetHeader::kNeedsChecksum);
  EXPECT_EQ(v.gso_type, VnetHeader::kGsoTcpV4);
  EXPECT_EQ(v.gso_size, kMss);
  EXPECT_EQ(v.hdr_len, 54u);
  EXPECT_EQ(v.csum_start, 34u);
  EXPECT_EQ(v.csum_offset, 16u);
}

// The same for IPv6 (issue #31): no header checksum, the payload length instead of the total
// length, GSO_TCPV6, and the checksum field holding RFC 8200's pseudo-header sum.
TEST_F(TxBatchTest, Ipv6SegmentsOfAFlowBecomeOneGsoTcpV6Packet) {
  Segment s;
  s.ipv6 = true;
  AddRun(3, s);
  Segment last = s;
  last.seq = s.seq + 3 * kMss;
  last.fill = static_cast<uint8_t>(3 * kMss);
  last.payload = 700;
  last.flags = kAck | kPsh;
  ASSERT_TRUE(Add(last));
  batch_.Seal();
  ASSERT_EQ(batch_.size(), 1u);
  EXPECT_EQ(batch_.segments(0), 4u);
  const std::vector<uint8_t> f = batch_.Frame(0);
  const uint32_t payload = 3 * kMss + 700;
  ASSERT_EQ(f.size(), 14u + 60 + payload);
  const uint8_t* ip = f.data() + 14;
  EXPECT_EQ(ip[0] >> 4, 6);
  EXPECT_EQ(Get16(ip + 4), 20 + payload) << "the payload length of the whole packet";
  const uint8_t* tcp = ip + 40;
  EXPECT_EQ(Get32(tcp + 4), 1000u);
  EXPECT_EQ(tcp[13], kAck | kPsh);
  EXPECT_EQ(Get16(tcp + 16), InetFold(Ipv6PseudoHeaderSum(ip, IPPROTO_TCP, 20 + payload)));
  for (uint32_t i = 0; i < payload; ++i) {
    ASSERT_EQ(tcp[20 + i], static_cast<uint8_t>(i)) << "payload byte " << i;
  }
  const VnetHeader& v = batch_.vnet(0);
  EXPECT_EQ(v.flags, VnetHeader::kNeedsChecksum);
  EXPECT_EQ(v.gso_type, VnetHeader::kGsoTcpV6);
  EXPECT_EQ(v.gso_size, kMss);
  EXPECT_EQ(v.hdr_len, 74u);
  EXPECT_EQ(v.csum_start, 54u);
  EXPECT_EQ(v.csum_offset, 16u);
  // One segment alone: no GSO, its checksum offloaded all the same.
  batch_.Clear();
  ASSERT_TRUE(Add(s));
  batch_.Seal();
  EXPECT_EQ(batch_.vnet(0).gso_type, 0);
  EXPECT_EQ(batch_.vnet(0).csum_start, 54u);
}

// IPv6 flows that differ only in the last byte of an address (where IPv4's offsets would not
// look) are two flows; nor does an IPv4 segment continue an IPv6 one.
TEST_F(TxBatchTest, Ipv6SegmentsOfOtherFlowsOrAnotherFamilyAreNotMerged) {
  Segment s;
  s.ipv6 = true;
  ASSERT_TRUE(Add(s));
  Segment other = s;
  other.peer = 3;
  other.seq = s.seq + kMss;
  ASSERT_TRUE(Add(other));
  Segment v4 = other;
  v4.ipv6 = false;
  v4.seq = other.seq + kMss;
  ASSERT_TRUE(Add(v4));
  batch_.Seal();
  ASSERT_EQ(batch_.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(batch_.segments(i), 1u) << "packet " << i;
  EXPECT_NE(batch_.flow(0), batch_.flow(1));
  EXPECT_NE(batch_.flow(0), 0u);
  EXPECT_EQ(batch_.vnet(2).csum_start, 34u);
}

TEST_F(TxBatchTest, OnlyTheNextSegmentOfTheSameFlowAfterFullOnesIsMerged) {
  Segment s;
  ASSERT_TRUE(Add(s));
  Segment other = s;
  other.sport = 40001;  // another flow
  other.seq = s.seq + kMss;
  ASSERT_TRUE(Add(other));
  Segment gap = s;
  gap.seq = s.seq + 2 * kMss;  // continues neither: `other` is the open packet
  ASSERT_TRUE(Add(gap));
  Segment skip = gap;
  skip.seq = gap.seq + kMss + 1;  // a gap of one byte
  ASSERT_TRUE(Add(skip));
  Segment shorter = skip;
  shorter.seq = skip.seq + kMss;
  shorter.payload = 100;  // merged; closes the packet
  ASSERT_TRUE(Add(shorter));
  Segment after_short = shorter;
  after_short.seq = shorter.seq + 100;
  ASSERT_TRUE(Add(after_short));
  batch_.Seal();
  ASSERT_EQ(batch_.size(), 5u);
  const uint32_t want[5] = {1, 1, 1, 2, 1};
  for (uint32_t i = 0; i < 5; ++i) EXPECT_EQ(batch_.segments(i), want[i]) << "packet " << i;
  EXPECT_EQ(batch_.vnet(0).gso_type, 0) << "one segment: no GSO";
  EXPECT_EQ(batch_.vnet(0).flags, VnetHeader::kNeedsChecksum) << "but the checksum offloaded";
  EXPECT_EQ(batch_.vnet(3).gso_type, VnetHeader::kGsoTcpV4);
}

TEST_F(TxBatchTest, FinEndsAPacketAndBareAcksSynsAndOtherOptionsStandAlone) {
  Segment s;
  ASSERT_TRUE(Add(s));
  Segment fin = s;
  fin.seq = s.seq + kMss;
  fin.flags = kAck | kFin;  // merged, the last segment
  ASSERT_TRUE(Add(fin));
  Segment bare = fin;
  bare.seq = fin.seq + kMss + 1;
  bare.payload = 0;  // a bare ACK
  ASSERT_TRUE(Add(bare));
  Segment syn = bare;
  syn.flags = kSyn | kAck;
  ASSERT_TRUE(Add(syn));
  Segment a = bare;
  a.payload = kMss;
  ASSERT_TRUE(Add(a));
  Segment sack = a;
  sack.seq = a.seq + kMss;
  sack.options = {1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 2};  // NOP NOP SACK one block
  ASSERT_TRUE(Add(sack));
  batch_.Seal();
  ASSERT_EQ(batch_.size(), 5u);
  EXPECT_EQ(batch_.segments(0), 2u);
  EXPECT_EQ(batch_.Frame(0)[14 + 20 + 13], kAck | kFin) << "FIN on the merged packet";
  for (uint32_t i = 1; i < 5; ++i) EXPECT_EQ(batch_.segments(i), 1u) << "packet " << i;
}

// LwipNetif::FlushTx sends a batch of bare ACKs through the packet socket with --tune
// tx-small=acks: ACK flag alone, no payload, options (SACK) allowed; any other packet makes it a
// mixed batch.
TEST_F(TxBatchTest, ABatchKnowsWhetherItHoldsBareAcksOnly) {
  EXPECT_FALSE(batch_.bare_acks_only()) << "empty";
  Segment bare;
  bare.payload = 0;
  ASSERT_TRUE(Add(bare));
  Segment sack = bare;
  sack.options = {1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 2};  // NOP NOP SACK one block
  ASSERT_TRUE(Add(sack));
  EXPECT_TRUE(batch_.bare_acks_only());
  for (const uint8_t flags : {uint8_t{kAck | kPsh}, uint8_t{kAck | kFin}, uint8_t{kSyn | kAck}}) {
    batch_.Clear();
    ASSERT_TRUE(Add(bare));
    Segment other = bare;
    other.flags = flags;
    ASSERT_TRUE(Add(other));
    EXPECT_FALSE(batch_.bare_acks_only()) << "flags " << int{flags};
  }
  batch_.Clear();
  Segment data;
  ASSERT_TRUE(Add(data));
  ASSERT_TRUE(Add(bare));
  EXPECT_FALSE(batch_.bare_acks_only()) << "data";
  batch_.Clear();
  EXPECT_FALSE(batch_.bare_acks_only()) << "cleared";
}

TEST_F(TxBatchTest, APacketStopsAtWhatOneIpPacketCarries) {
  AddRun(50, Segment{});  // 72,400 bytes of payload
  batch_.Seal();
  ASSERT_EQ(batch_.size(), 2u);
  EXPECT_EQ(batch_.segments(0), 45u) << "45 x 1448 + 40 <= 65535 < 46 x 1448 + 40";
  EXPECT_EQ(batch_.segments(1), 5u);
  EXPECT_LE(batch_.Frame(0).size() - 14, 0xffffu);
}

// The payload is sent from lwIP's memory: the batch references each packet whose payload it
// points at (the caller here frees its own reference at once, as lwIP may when an ACK comes
// in before the batch is sent: under ASan a missing reference is a use after free), lets go
// at Clear, and copies short packets whole instead.
TEST_F(TxBatchTest, TheBatchHoldsWhatItPointsAtUntilCleared) {
  Segment s;
  s.payload_pbufs = 3;
  pbuf* first = Build(s);
  ASSERT_TRUE(batch_.Add(kEth, first));
  EXPECT_EQ(first->ref, 2) << "referenced by the batch";
  pbuf_free(first);
  Segment in_head = s;
  in_head.seq = s.seq + kMss;
  in_head.fill = static_cast<uint8_t>(kMss);
  in_head.payload_pbufs = 0;
  ASSERT_TRUE(Add(in_head));
  Segment second_flow = s;
  second_flow.sport = 40001;
  second_flow.payload = TxBatch::kReferenceFrom - 1;
  pbuf* short_one = Build(second_flow);
  ASSERT_TRUE(batch_.Add(kEth, short_one));
  EXPECT_EQ(short_one->ref, 1) << "copied, not referenced";
  pbuf_free(short_one);
  EXPECT_EQ(batch_.pinned(), 2u);
  batch_.Seal();
  ASSERT_EQ(batch_.size(), 2u);
  EXPECT_EQ(batch_.segments(0), 2u);
  EXPECT_EQ(batch_.iovecs(0).size(), 6u) << "virtio-net header, headers, 3 + 1 payload pieces";
  EXPECT_EQ(batch_.iovecs(1).size(), 2u) << "virtio-net header, the whole packet";
  const std::vector<uint8_t> f = batch_.Frame(0);
  ASSERT_EQ(f.size(), 14u + 40 + 2 * kMss);
  for (uint32_t i = 0; i < 2 * kMss; ++i) {
    ASSERT_EQ(f[54 + i], static_cast<uint8_t>(i)) << "payload byte " << i;
  }
  const std::vector<uint8_t> g = batch_.Frame(1);
  ASSERT_EQ(g.size(), 14u + 40 + second_flow.payload);
  EXPECT_EQ(g[54 + 7], 7);
  size_t sent = 0;
  for (const iovec& v : batch_.iovecs(0)) sent += v.iov_len;
  EXPECT_EQ(sent, sizeof(VnetHeader) + f.size()) << "what sendmmsg takes";

  pbuf* kept = Build(s);
  batch_.Clear();
  ASSERT_TRUE(batch_.Add(kEth, kept));
  EXPECT_EQ(kept->ref, 2);
  batch_.Clear();
  EXPECT_EQ(kept->ref, 1) << "Clear lets go";
  EXPECT_EQ(batch_.pinned(), 0u);
  pbuf_free(kept);
}

TEST_F(TxBatchTest, AFullBatchRefusesAndClearStartsAgain) {
  Segment bare;
  bare.payload = 0;
  for (uint32_t i = 0; i < TxBatch::kMaxPackets; ++i) ASSERT_TRUE(Add(bare)) << i;
  EXPECT_FALSE(Add(bare));
  batch_.Clear();
  EXPECT_TRUE(batch_.empty());
  EXPECT_TRUE(Add(bare));
}

// The packet socket's destination protocol becomes the skb's, and the kernel segments a GSO
// packet by it: an IPv6 packet leaves as ETH_P_IPV6, an IPv4 one as ETH_P_IP (with ETH_P_IP for
// all, every GSO_TCPV6 packet was refused, ENOMEM, in LwipIpv6EchoTest/packet_socket).
TEST(PacketTxFamilyTest, EachPacketLeavesWithItsOwnProtocol) {
  InitLwipOnce();
  std::vector<uint16_t> protocols;
  auto tx = PacketTx::ForTest(
      [&](mmsghdr* msgs, unsigned count) -> int {
        for (unsigned i = 0; i < count; ++i) {
          const auto* to = static_cast<const sockaddr_ll*>(msgs[i].msg_hdr.msg_name);
          EXPECT_EQ(msgs[i].msg_hdr.msg_namelen, sizeof(sockaddr_ll));
          protocols.push_back(ntohs(to->sll_protocol));
        }
        return static_cast<int>(count);
      },
      "test0");
  constexpr uint8_t kEth6[14] = {2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0xdd};
  Segment v4;
  Segment v6;
  v6.ipv6 = true;
  v6.sport = 40001;
  for (const auto& [eth, segment] : {std::pair{&kEth, v4}, std::pair{&kEth6, v6}}) {
    for (int k = 0; k < 2; ++k) {  // two segments of the flow: one GSO packet
      Segment s = segment;
      s.seq += static_cast<uint32_t>(k) * kMss;
      pbuf* p = Build(s);
      ASSERT_TRUE(tx->Queue(*eth, p));
      pbuf_free(p);
    }
  }
  tx->Flush();
  EXPECT_EQ(protocols, (std::vector<uint16_t>{ETH_P_IP, ETH_P_IPV6}));
  EXPECT_EQ(tx->stats().gso_packets, 2u);
}

// PacketTx::Flush when the kernel refuses a packet (stack/packet_tx.h). The kernel is replaced
// by a script here (PacketTx::ForTest): a veth refuses for want of room only while its peer's
// NAPI thread is late, which no test can arrange on purpose; bench/run's counters show it.
class PacketTxRefusalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    InitLwipOnce();
    tx_ = PacketTx::ForTest(
        [this](mmsghdr* msgs, unsigned count) -> int {
          unsigned taken = 0;
          while (taken < count && room_ > 0) {
            --room_;
            // iovec 1: Ethernet, IP and TCP headers; the packets here are one flow's data
            // segments (each its own packet: a different source port each), told by port.
            const auto* h = static_cast<const uint8_t*>(msgs[taken].msg_hdr.msg_iov[1].iov_base);
            wire_.push_back(Get16(h + 14 + 20));
            ++taken;
          }
          if (taken > 0) return static_cast<int>(taken);
          errno = refusal_;
          return -1;
        },
        "test0");
  }
  // Queues one packet from source port `port` (a flow of its own: nothing merges).
  void Queue(uint16_t port) {
    Segment s;
    s.sport = port;
    pbuf* p = Build(s);
    tx_->Queue(kEth, p);
    pbuf_free(p);
  }
  std::unique_ptr<PacketTx> tx_;
  std::vector<uint16_t> wire_;  // source ports, in the order the "kernel" took them
  unsigned room_ = 0;           // packets the kernel takes before it refuses
  int refusal_ = ENOBUFS;
};

TEST_F(PacketTxRefusalTest, PacketsRefusedForWantOfRoomGoOutNextTimeInOrder) {
  for (const int refusal : {ENOBUFS, EAGAIN}) {
    wire_.clear();
    refusal_ = refusal;
    room_ = 2;
    for (uint16_t port = 1; port <= 5; ++port) Queue(port);
    tx_->Flush();
    EXPECT_EQ(wire_, (std::vector<uint16_t>{1, 2}));
    EXPECT_TRUE(tx_->deferring());
    room_ = 0;
    tx_->Flush();  // still no room: nothing lost, nothing sent
    EXPECT_EQ(wire_.size(), 2u);
    Queue(6);  // behind the refused ones
    room_ = 100;
    tx_->Flush();
    EXPECT_EQ(wire_, (std::vector<uint16_t>{1, 2, 3, 4, 5, 6})) << "errno " << refusal;
    EXPECT_FALSE(tx_->deferring());
  }
  EXPECT_EQ(tx_->stats().dropped, 0u);
  EXPECT_EQ(tx_->stats().packets, 12u);
  EXPECT_EQ(tx_->stats().deferred, 2 * (3u + 3u));  // each refusal counts what waited
  EXPECT_EQ(tx_->batch().pinned(), 0u);
}

// Any other refusal drops that packet only (TCP resends it) and the rest go on.
TEST_F(PacketTxRefusalTest, OtherRefusalsDropOnlyThatPacket) {
  // This kernel takes packets up to port 2, refuses that one once with EINVAL, then takes all.
  tx_ = PacketTx::ForTest(
      [this, refused = false](mmsghdr* msgs, unsigned count) mutable -> int {
        const auto* h = static_cast<const uint8_t*>(msgs[0].msg_hdr.msg_iov[1].iov_base);
        if (!refused && Get16(h + 14 + 20) == 2) {
          refused = true;
          errno = EINVAL;
          return -1;
        }
        for (unsigned i = 0; i < count; ++i) {
          const auto* hi = static_cast<const uint8_t*>(msgs[i].msg_hdr.msg_iov[1].iov_base);
          if (!refused && Get16(hi + 14 + 20) == 2) return static_cast<int>(i);
          wire_.push_back(Get16(hi + 14 + 20));
        }
        return static_cast<int>(count);
      },
      "test0");
  for (uint16_t port = 1; port <= 3; ++port) Queue(port);
  tx_->Flush();
  EXPECT_EQ(wire_, (std::vector<uint16_t>{1, 3}));
  EXPECT_EQ(tx_->stats().dropped, 1u);
  EXPECT_EQ(tx_->stats().deferred, 0u);
  EXPECT_FALSE(tx_->deferring());
}

// A kernel that takes nothing for kMaxDeferralMs: the packets are given up (counted as
// dropped) and the pbufs they pinned released.
TEST_F(PacketTxRefusalTest, RefusedForTooLongAreGivenUp) {
  room_ = 0;
  Segment s;
  s.payload = 1000;  // referenced, not copied: the batch pins its pbuf
  pbuf* p = Build(s);
  ASSERT_TRUE(tx_->Queue(kEth, p));
  EXPECT_EQ(p->ref, 2);
  tx_->Flush();
  EXPECT_TRUE(tx_->deferring());
  const auto start = std::chrono::steady_clock::now();
  while (tx_->deferring() && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    EXPECT_EQ(tx_->stats().dropped, 0u);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    tx_->Flush();
  }
  EXPECT_FALSE(tx_->deferring());
  EXPECT_GE(std::chrono::steady_clock::now() - start,
            std::chrono::milliseconds(PacketTx::kMaxDeferralMs));
  EXPECT_EQ(tx_->stats().dropped, 1u);
  EXPECT_EQ(p->ref, 1) << "the given-up packet's pbuf released";
  pbuf_free(p);
  EXPECT_TRUE(wire_.empty());
}

// While refused packets fill the batch, Queue takes no more and says so (lwIP then keeps the
// segment: ERR_MEM), instead of dropping it; once the kernel has room again it takes them.
TEST_F(PacketTxRefusalTest, ABatchFullOfRefusedPacketsTakesNoMore) {
  room_ = 0;
  uint16_t port = 1;
  for (; port <= TxBatch::kMaxPackets; ++port) Queue(port);
  tx_->Flush();
  ASSERT_TRUE(tx_->deferring());
  Segment s;
  s.sport = port;
  pbuf* p = Build(s);
  EXPECT_FALSE(tx_->Queue(kEth, p));
  EXPECT_EQ(tx_->stats().full, 1u);
  room_ = 1000;
  EXPECT_TRUE(tx_->Queue(kEth, p)) << "the batch sent, room for it";
  pbuf_free(p);
  tx_->Flush();
  ASSERT_EQ(wire_.size(), TxBatch::kMaxPackets + 1u);
  for (uint16_t i = 0; i <= TxBatch::kMaxPackets; ++i) EXPECT_EQ(wire_[i], i + 1);
  EXPECT_EQ(tx_->stats().dropped, 0u);
}

}  // namespace
}  // namespace xdpfwd
