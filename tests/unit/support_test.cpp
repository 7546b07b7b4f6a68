// The test helpers must be able to fail: the hash sees order and loss, the packet builder
// produces valid checksums and the lengths it claims.
#include <gtest/gtest.h>

#include <vector>

#include "tests/support/packet_builder.h"
#include "tests/support/tcp.h"

namespace xdpfwd::test {
namespace {

TEST(Fnv1a, SeesReorderingAndLoss) {
  std::vector<uint8_t> data(4096);
  PatternStream(7).Fill(data.data(), data.size());
  Fnv1a whole, split, swapped, short_by_one;
  whole.Update(data.data(), data.size());
  split.Update(data.data(), 1000);
  split.Update(data.data() + 1000, data.size() - 1000);
  swapped.Update(data.data() + 2048, 2048);
  swapped.Update(data.data(), 2048);
  short_by_one.Update(data.data(), data.size() - 1);
  EXPECT_EQ(whole.value(), split.value());
  EXPECT_NE(whole.value(), swapped.value());
  EXPECT_NE(whole.value(), short_by_one.value());
}

TEST(PatternStream, SameSeedSameBytes) {
  std::vector<uint8_t> a(1000), b(1000), c(1000);
  PatternStream(1).Fill(a.data(), a.size());
  PatternStream(1).Fill(b.data(), b.size());
  PatternStream(2).Fill(c.data(), c.size());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(PacketBuilder, TcpFrameHasValidChecksumsAndLengths) {
  const auto f = Packet()
                     .Eth()
                     .IPv4("198.18.0.2", "198.18.0.1")
                     .Tcp(40000, 9000, kSyn)
                     .Payload("hello")
                     .Build();
  ASSERT_EQ(f.size(), 14u + 20 + 20 + 5);
  EXPECT_EQ(InternetChecksum(&f[14], 20), 0) << "IPv4 header checksum must verify to zero";
  const uint32_t seg = 25;
  uint32_t pseudo = (198 << 8 | 18) + (0 << 8 | 2) + (198 << 8 | 18) + (0 << 8 | 1) + 6 + seg;
  EXPECT_EQ(InternetChecksum(&f[34], seg, pseudo), 0) << "TCP checksum must verify to zero";
  EXPECT_EQ(f[14 + 2] << 8 | f[14 + 3], 45);  // IP total length
}

// The IPv6 SYN of InetChecksumTest.AnIpv6TcpSegmentsPseudoHeaderGivesItsKnownChecksum, built
// here: the builder's checksum is that test's known answer, b26b.
TEST(PacketBuilder, Ipv6TcpChecksumIsTheKnownAnswer) {
  const auto f = Packet()
                     .Eth(0x86dd)
                     .IPv6("2001:db8::1", "2001:db8:0:1::2")
                     .Tcp(40000, 443, kSyn, 0x01020304)
                     .Build();
  ASSERT_EQ(f.size(), 14u + 40 + 20);
  EXPECT_EQ(f[14 + 4] << 8 | f[14 + 5], 20);  // payload length
  EXPECT_EQ(f[14 + 40 + 16] << 8 | f[14 + 40 + 17], 0xb26b);
}

TEST(PacketBuilder, OptionsFragmentsAndTruncation) {
  const auto opt =
      Packet().Eth().IPv4("1.2.3.4", "5.6.7.8").IpOptions({1, 1, 1}).Tcp(1, 2, kAck).Build();
  EXPECT_EQ(opt[14] & 0x0f, 6) << "IHL counts the padded option word";
  const auto frag = Packet().Eth().IPv4("1.2.3.4", "5.6.7.8").Fragment(8, true).Build();
  EXPECT_EQ(frag[14 + 6] << 8 | frag[14 + 7], 0x2001);
  EXPECT_EQ(Packet().Eth().IPv4("1.2.3.4", "5.6.7.8").TruncateTo(20).Build().size(), 20u);
}

}  // namespace
}  // namespace xdpfwd::test
