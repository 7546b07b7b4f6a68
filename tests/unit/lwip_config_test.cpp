// lwIP as we build it: initialises under NO_SYS, returns pool entries, and its first SYN carries
// the options lwipopts.h promises (MSS from the netif MTU, window scaling, SACK permitted) from
// a local port outside the kernel's ephemeral range.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "stack/siphash.h"
#include "stack/worker.h"

extern "C" {
#include "lwip/ip4_addr.h"
#include "lwip/memp.h"
#include "lwip/netif.h"
#include "lwip/pbuf.h"
#include "lwip/stats.h"
#include "lwip/tcp.h"
#include "lwip/timeouts.h"
#include "xdpfwd_lwip_hooks.h"
}

namespace {

std::vector<std::vector<uint8_t>> g_sent;  // IPv4 packets the test netif was asked to send

err_t CaptureOutput(struct netif*, struct pbuf* p, const ip4_addr_t*) {
  std::vector<uint8_t> bytes(p->tot_len);
  pbuf_copy_partial(p, bytes.data(), p->tot_len, 0);
  g_sent.push_back(std::move(bytes));
  return ERR_OK;
}

err_t InitCaptureNetif(struct netif* netif) {
  netif->name[0] = 't';
  netif->name[1] = '0';
  netif->mtu = 1500;
  netif->output = CaptureOutput;
  netif->flags = NETIF_FLAG_LINK_UP;
  return ERR_OK;
}

class LwipTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { xdpfwd::InitLwipOnce(); }

  void SetUp() override {
    g_sent.clear();
    ip4_addr_t addr, mask, gw;
    IP4_ADDR(&addr, 198, 18, 0, 1);
    IP4_ADDR(&mask, 255, 255, 255, 0);
    IP4_ADDR(&gw, 198, 18, 0, 254);
    ASSERT_NE(netif_add(&netif_, &addr, &mask, &gw, nullptr, InitCaptureNetif, netif_input),
              nullptr);
    netif_set_up(&netif_);
  }
  void TearDown() override { netif_remove(&netif_); }

  static mem_size_t PcbsInUse() { return lwip_stats.memp[MEMP_TCP_PCB]->used; }

  struct netif netif_ {};
};

TEST_F(LwipTest, PcbPoolReturnsToStartCount) {
  const mem_size_t before = PcbsInUse();
  std::vector<tcp_pcb*> pcbs;
  for (int i = 0; i < 100; ++i) {
    tcp_pcb* pcb = tcp_new();
    ASSERT_NE(pcb, nullptr);
    pcbs.push_back(pcb);
  }
  EXPECT_EQ(PcbsInUse(), before + 100);
  for (tcp_pcb* pcb : pcbs) tcp_abort(pcb);
  EXPECT_EQ(PcbsInUse(), before);
  EXPECT_EQ(lwip_stats.memp[MEMP_TCP_PCB]->err, 0);
}

TEST_F(LwipTest, SynCarriesRelayOptions) {
  tcp_pcb* pcb = tcp_new();
  ASSERT_NE(pcb, nullptr);
  ip_addr_t remote;
  IP_ADDR4(&remote, 198, 18, 0, 2);
  ASSERT_EQ(tcp_connect(pcb, &remote, 9001, nullptr), ERR_OK);
  ASSERT_EQ(g_sent.size(), 1u) << "tcp_connect should emit the SYN at once";
  const std::vector<uint8_t>& ip = g_sent[0];
  ASSERT_GE(ip.size(), 40u);
  const size_t ihl = (ip[0] & 0x0f) * 4u;
  const uint8_t* tcp = ip.data() + ihl;
  const uint16_t sport = static_cast<uint16_t>(tcp[0] << 8 | tcp[1]);
  EXPECT_GE(sport, TCP_LOCAL_PORT_RANGE_START);
  EXPECT_LE(sport, TCP_LOCAL_PORT_RANGE_END);
  EXPECT_EQ(tcp[13], 0x02) << "flags should be SYN only";

  int mss = -1, wscale = -1;
  bool sack_permitted = false;
  const size_t doff = (tcp[12] >> 4) * 4u;
  for (size_t i = 20; i < doff;) {
    const uint8_t kind = tcp[i];
    if (kind == 0) break;
    if (kind == 1) {
      ++i;
      continue;
    }
    const uint8_t len = tcp[i + 1];
    if (kind == 2) mss = tcp[i + 2] << 8 | tcp[i + 3];
    if (kind == 3) wscale = tcp[i + 2];
    if (kind == 4) sack_permitted = true;
    i += len;
  }
  EXPECT_EQ(mss, 1460) << "MSS follows the netif MTU (1500), not TCP_MSS";
  EXPECT_EQ(wscale, TCP_RCV_SCALE);
  EXPECT_TRUE(sack_permitted);
  tcp_abort(pcb);
}

TEST(LwipIsn, DiffersAcrossTuplesAndIsNotConstant) {
  ip_addr_t a, b;
  IP_ADDR4(&a, 198, 18, 0, 1);
  IP_ADDR4(&b, 198, 18, 0, 2);
  const u32_t x = xdpfwd_tcp_isn(&a, 61000, &b, 9001);
  const u32_t y = xdpfwd_tcp_isn(&a, 61001, &b, 9001);
  const u32_t z = xdpfwd_tcp_isn(&b, 61000, &a, 9001);
  // A keyed hash over 32 bits: equal values for different tuples would be a 1-in-2^32 event.
  EXPECT_NE(x, y);
  EXPECT_NE(x, z);
  EXPECT_NE(y, z);
}

// IPv6 tuples (issue #31) that differ only in the last bit of an address, or only in the prefix,
// get unrelated ISNs: the hash covers every word of both addresses. Calls a few microseconds
// apart differ by a few clock ticks (4 us each) at most; a hash that missed the difference
// would leave only that, a keyed hash differs by far more but for a 1-in-32768 chance.
TEST(LwipIsn, Ipv6TuplesThatDifferAnywhereInTheAddressesDiffer) {
  ip_addr_t a, b, b_last, b_prefix;
  IP_ADDR6_HOST(&a, 0x20010db8, 0, 0, 1);
  IP_ADDR6_HOST(&b, 0x20010db8, 0, 0, 2);
  IP_ADDR6_HOST(&b_last, 0x20010db8, 0, 0, 3);
  IP_ADDR6_HOST(&b_prefix, 0x20010db9, 0, 0, 2);
  const u32_t x = xdpfwd_tcp_isn(&a, 61000, &b, 9001);
  const u32_t y = xdpfwd_tcp_isn(&a, 61000, &b_last, 9001);
  const u32_t z = xdpfwd_tcp_isn(&a, 61000, &b_prefix, 9001);
  const u32_t w = xdpfwd_tcp_isn(&b, 61000, &a, 9001);
  auto far = [](u32_t p, u32_t q) {
    const int64_t d = static_cast<int32_t>(p - q);
    return d > (1 << 16) || d < -(1 << 16);
  };
  EXPECT_TRUE(far(x, y)) << x << " " << y;
  EXPECT_TRUE(far(x, z)) << x << " " << z;
  EXPECT_TRUE(far(x, w)) << x << " " << w;
}

// The hash behind those ISNs is SipHash-2-4: the authors' reference vector for a 16-byte message
// (vectors.h of the SipHash reference code, vectors_sip64[16]: key 00..0f, message 00..0f, the
// tag db 9b c2 57 7f cc 2a 3f, least significant byte first).
TEST(LwipIsn, HashIsSipHash24ByItsReferenceVector) {
  const uint64_t bytes_0_to_7 = 0x0706050403020100ULL, bytes_8_to_15 = 0x0f0e0d0c0b0a0908ULL;
  const uint64_t key[2] = {bytes_0_to_7, bytes_8_to_15};
  EXPECT_EQ(xdpfwd::SipHash24(key, bytes_0_to_7, bytes_8_to_15), 0x3f2acc7f57c29bdbULL);
  // One bit of the key or the message changes the tag.
  const uint64_t other_key[2] = {bytes_0_to_7 ^ 1, bytes_8_to_15};
  EXPECT_NE(xdpfwd::SipHash24(other_key, bytes_0_to_7, bytes_8_to_15), 0x3f2acc7f57c29bdbULL);
  EXPECT_NE(xdpfwd::SipHash24(key, bytes_0_to_7, bytes_8_to_15 ^ (1ULL << 63)),
            0x3f2acc7f57c29bdbULL);
}

}  // namespace
