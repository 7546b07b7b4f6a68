// Toeplitz hashing against the published RSS verification suite (Microsoft's, also in Intel's
// 82599 datasheet 7.1.2.8.3): IPv4 and IPv6, each with TCP, the default 40-byte key.
#include "stack/rss.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>

namespace xdpfwd {
namespace {

in_addr Ip(const char* dotted) {
  in_addr a{};
  inet_pton(AF_INET, dotted, &a);
  return a;
}

struct Vector {
  const char* dst;
  uint16_t dport;
  const char* src;
  uint16_t sport;
  uint32_t ipv4;      // hash of the two addresses only
  uint32_t ipv4_tcp;  // with the ports
};

// As the suite lists them: destination first.
constexpr Vector kSuite[] = {
    {"161.142.100.80", 1766, "66.9.149.187", 2794, 0x323e8fc2, 0x51ccc178},
    {"65.69.140.83", 4739, "199.92.111.2", 14230, 0xd718262a, 0xc626b0ea},
    {"12.22.207.184", 38024, "24.19.198.95", 12898, 0xd2d0a5de, 0x5c2b394a},
    {"209.142.163.6", 2217, "38.27.205.30", 48228, 0x82989176, 0xafc7327f},
    {"202.188.127.2", 1303, "153.39.163.191", 44251, 0x5d1809c5, 0x10e828a2},
};

TEST(ToeplitzTest, MatchesTheVerificationSuiteForIpv4AndTcp) {
  for (const Vector& v : kSuite) {
    EXPECT_EQ(ToeplitzIpv4Tcp(kDefaultRssKey, Ip(v.src), Ip(v.dst), v.sport, v.dport), v.ipv4_tcp)
        << v.src << ":" << v.sport << " -> " << v.dst << ":" << v.dport;
    uint8_t addrs[8];
    const in_addr s = Ip(v.src), d = Ip(v.dst);
    std::memcpy(addrs, &s, 4);
    std::memcpy(addrs + 4, &d, 4);
    EXPECT_EQ(ToeplitzHash(kDefaultRssKey, addrs), v.ipv4) << v.src << " -> " << v.dst;
  }
}

// The suite's IPv6 vectors, destination first as it lists them.
struct Vector6 {
  const char* dst;
  uint16_t dport;
  const char* src;
  uint16_t sport;
  uint32_t ipv6;      // hash of the two addresses only
  uint32_t ipv6_tcp;  // with the ports
};

constexpr Vector6 kSuite6[] = {
    {"3ffe:2501:200:3::1", 1766, "3ffe:2501:200:1fff::7", 2794, 0x2cc18cd5, 0x40207d3d},
    {"ff02::1", 4739, "3ffe:501:8::260:97ff:fe40:efab", 14230, 0x0f0c461c, 0xdde51bbf},
    {"fe80::200:f8ff:fe21:67cf", 38024, "3ffe:1900:4545:3:200:f8ff:fe21:67cf", 44251, 0x4b61e985,
     0x02d1feef},
};

in6_addr Ip6(const char* text) {
  in6_addr a{};
  inet_pton(AF_INET6, text, &a);
  return a;
}

TEST(ToeplitzTest, MatchesTheVerificationSuiteForIpv6AndTcp) {
  for (const Vector6& v : kSuite6) {
    const in6_addr s = Ip6(v.src), d = Ip6(v.dst);
    EXPECT_EQ(ToeplitzIpv6Tcp(kDefaultRssKey, s, d, v.sport, v.dport), v.ipv6_tcp)
        << "[" << v.src << "]:" << v.sport << " -> [" << v.dst << "]:" << v.dport;
    uint8_t addrs[32];
    std::memcpy(addrs, &s, 16);
    std::memcpy(addrs + 16, &d, 16);
    EXPECT_EQ(ToeplitzHash(kDefaultRssKey, addrs), v.ipv6) << v.src << " -> " << v.dst;
  }
}

TEST(ToeplitzTest, AKeyTooShortForTheInputHashesNothing) {
  const uint8_t key[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  const uint8_t input[12] = {0xff};
  EXPECT_EQ(ToeplitzHash(key, input), 0u);
}

TEST(RssIndirectionTest, TheLowBitsOfTheHashPickTheEntry) {
  RssTable table;
  table.indirection = {3, 1, 2, 0};
  EXPECT_EQ(table.QueueOf(0), 3u);
  EXPECT_EQ(table.QueueOf(5), 1u);
  EXPECT_EQ(table.QueueOf(0xfffffffe), 2u);
}

}  // namespace
}  // namespace xdpfwd
