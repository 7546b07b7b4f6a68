// The helpers every parser and checksum goes through (os/parse_number.h, os/inet_checksum.h).
#include <gtest/gtest.h>

#include <cstdint>

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

}  // namespace
}  // namespace xdpfwd
