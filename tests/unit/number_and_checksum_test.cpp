// The helpers every parser and checksum goes through (os/parse_number.h, os/inet_checksum.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>

#include "os/inet_checksum.h"
#include "os/parse_number.h"

namespace xdpfwd {
namespace {

TEST(ParseDecimalTest, TakesTheWholeTextAsDigitsWithinItsRange) {
  EXPECT_EQ(ParseDecimal<uint32_t>("0"), 0u);
  EXPECT_EQ(ParseDecimal<uint32_t>("4294967295"), 4294967295u);
  EXPECT_EQ(ParseDecimal<uint32_t>("4294967296"), std::nullopt) << "does not fit";
  EXPECT_EQ(ParseDecimal<uint32_t>("7", 1, 7), 7u);
  EXPECT_EQ(ParseDecimal<uint32_t>("8", 1, 7), std::nullopt);
  EXPECT_EQ(ParseDecimal<uint32_t>("0", 1, 7), std::nullopt);
  EXPECT_EQ(ParseDecimal<int>("12"), 12);
  for (const char* bad : {"", " 1", "1 ", "+1", "-1", "0x10", "1k", "1.5", "١"}) {
    EXPECT_EQ(ParseDecimal<int>(bad), std::nullopt) << "'" << bad << "'";
    EXPECT_EQ(ParseDecimal<uint64_t>(bad), std::nullopt) << "'" << bad << "'";
  }
}

TEST(ParseDecimalTest, PortsAreOneTo65535UnlessZeroIsAllowed) {
  EXPECT_EQ(ParsePortNumber("1"), 1);
  EXPECT_EQ(ParsePortNumber("65535"), 65535);
  EXPECT_EQ(ParsePortNumber("65536"), std::nullopt);
  EXPECT_EQ(ParsePortNumber("0"), std::nullopt);
  EXPECT_EQ(ParsePortNumber("0", /*allow_zero=*/true), 0);
  EXPECT_EQ(ParsePortNumber("http"), std::nullopt);
}

// RFC 1071 section 3's worked example: the words 0001 f203 f4f5 f6f7 sum to 2ddf0, which folds
// to ddf2; the checksum stored is its complement, 220d.
TEST(InetChecksumTest, MatchesRfc1071sExample) {
  const uint8_t bytes[] = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
  EXPECT_EQ(InetSum(bytes, sizeof bytes), 0x2ddf0u);
  EXPECT_EQ(InetFold(0x2ddf0), 0xddf2);
  EXPECT_EQ(InetChecksum(bytes, sizeof bytes), 0x220d);
}

// A real IPv4 header (the example commonly used to teach it: 172.16.10.99 -> 172.16.10.12,
// checksum b1e6) verifies to 0 with its checksum in place, and gets b1e6 back with it zeroed.
TEST(InetChecksumTest, AnIpv4HeaderVerifiesToZeroAndAnOddLengthIsPadded) {
  uint8_t ip[] = {0x45, 0x00, 0x00, 0x3c, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x06,
                  0xb1, 0xe6, 0xac, 0x10, 0x0a, 0x63, 0xac, 0x10, 0x0a, 0x0c};
  EXPECT_EQ(InetChecksum(ip, sizeof ip), 0);
  ip[10] = ip[11] = 0;
  EXPECT_EQ(InetChecksum(ip, sizeof ip), 0xb1e6);
  const uint8_t odd[] = {0x12, 0x34, 0x56};  // 1234 + 5600
  EXPECT_EQ(InetSum(odd, sizeof odd), 0x6834u);
  EXPECT_EQ(Ipv4PseudoHeaderSum(ip, 6, 40), 0xac10u + 0x0a63 + 0xac10 + 0x0a0c + 6 + 40);
}

// An IPv6 TCP SYN, 2001:db8::1 port 40000 -> 2001:db8:0:1::2 port 443, seq 0x01020304, window
// 65535, no options: its checksum is b26b (worked out apart from this code, by a few lines of
// Python over RFC 8200's pseudo-header: addresses, 32-bit length, three zero bytes, next
// header). The segment verifies to 0 with it in place; the length counts as 32 bits.
TEST(InetChecksumTest, AnIpv6TcpSegmentsPseudoHeaderGivesItsKnownChecksum) {
  uint8_t ip[40] = {0x60, 0, 0, 0, 0x00, 0x14, 6, 64};
  const uint8_t addresses[32] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
                                 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2};
  std::copy(std::begin(addresses), std::end(addresses), ip + 8);
  uint8_t tcp[20] = {0x9c, 0x40, 0x01, 0xbb, 0x01, 0x02, 0x03, 0x04, 0, 0,
                     0,    0,    0x50, 0x02, 0xff, 0xff, 0,    0,    0, 0};
  EXPECT_EQ(Ipv6PseudoHeaderSum(ip, 6, sizeof tcp), 0x5b76u + 6 + 20);
  EXPECT_EQ(InetChecksum(tcp, sizeof tcp, Ipv6PseudoHeaderSum(ip, 6, sizeof tcp)), 0xb26b);
  tcp[16] = 0xb2;
  tcp[17] = 0x6b;
  EXPECT_EQ(InetChecksum(tcp, sizeof tcp, Ipv6PseudoHeaderSum(ip, 6, sizeof tcp)), 0);
  // IPv4's pseudo-header over the same bytes is another sum: the families cannot be mixed up.
  EXPECT_NE(InetChecksum(tcp, sizeof tcp, Ipv4PseudoHeaderSum(ip, 6, sizeof tcp)), 0);
  EXPECT_EQ(Ipv6PseudoHeaderSum(ip, 6, 0x10014), 0x5b76u + 6 + 1 + 0x14);
}

}  // namespace
}  // namespace xdpfwd
