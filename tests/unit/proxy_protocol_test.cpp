// PROXY protocol headers against the layouts of HAProxy's doc/proxy-protocol.txt: v1's text
// line (TCP4, TCP6, UNKNOWN), v2's signature, version and command, family and transport,
// address length, then addresses and ports in network order; the LOCAL command's header.
#include "forwarder/proxy_protocol.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <string>
#include <vector>

namespace xdpfwd {
namespace {

sockaddr_in V4(const char* addr, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  EXPECT_EQ(inet_pton(AF_INET, addr, &a.sin_addr), 1);
  a.sin_port = htons(port);
  return a;
}

sockaddr_in6 V6(const char* addr, uint16_t port) {
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  EXPECT_EQ(inet_pton(AF_INET6, addr, &a.sin6_addr), 1);
  a.sin6_port = htons(port);
  return a;
}

template <typename A, typename B>
std::vector<uint8_t> Header(ProxyVersion v, const A& from, const B& to) {
  const ProxyHeader h = MakeProxyHeader(v, reinterpret_cast<const sockaddr*>(&from),
                                        reinterpret_cast<const sockaddr*>(&to));
  return {h.bytes, h.bytes + h.size};
}

std::string Text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

const std::vector<uint8_t> kSignature = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d,
                                         0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};

TEST(ProxyProtocol, V1IsOneLineOfText) {
  EXPECT_EQ(Text(Header(ProxyVersion::kV1, V4("192.168.0.1", 56324), V4("192.168.0.11", 443))),
            "PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n");
  EXPECT_EQ(Text(Header(ProxyVersion::kV1, V6("2001:db8::1", 40000), V6("2001:db8::2", 80))),
            "PROXY TCP6 2001:db8::1 2001:db8::2 40000 80\r\n");
  // A dual-stack listener's IPv4 client: both IPv4-mapped, so TCP4 with the IPv4 addresses.
  EXPECT_EQ(
      Text(Header(ProxyVersion::kV1, V6("::ffff:10.0.0.7", 1234), V6("::ffff:10.0.1.1", 9000))),
      "PROXY TCP4 10.0.0.7 10.0.1.1 1234 9000\r\n");
  // Mixed: the IPv4 end is written IPv4-mapped under TCP6.
  EXPECT_EQ(Text(Header(ProxyVersion::kV1, V4("10.0.0.7", 1234), V6("2001:db8::2", 80))),
            "PROXY TCP6 ::ffff:10.0.0.7 2001:db8::2 1234 80\r\n");
  sockaddr other{};
  other.sa_family = AF_UNIX;
  const ProxyHeader unknown = MakeProxyHeader(ProxyVersion::kV1, &other, &other);
  EXPECT_EQ(std::string(unknown.bytes, unknown.bytes + unknown.size), "PROXY UNKNOWN\r\n");
}

TEST(ProxyProtocol, V1AtItsLongestFitsTheSpecificationsBound) {
  const auto line = Header(ProxyVersion::kV1, V6("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe", 65535),
                           V6("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffd", 65535));
  EXPECT_LE(line.size(), 107u);  // the specification's longest line, CRLF included
  EXPECT_EQ(Text(line).substr(line.size() - 2), "\r\n");
}

TEST(ProxyProtocol, V2Ipv4IsSignatureCommandFamilyLengthAddressesPorts) {
  const auto h = Header(ProxyVersion::kV2, V4("172.19.0.1", 42578), V4("172.19.0.3", 80));
  std::vector<uint8_t> want = kSignature;
  // Version 2 and PROXY (0x21); AF_INET and STREAM (0x11); 12 address bytes.
  want.insert(want.end(), {0x21, 0x11, 0x00, 0x0c});
  want.insert(want.end(), {172, 19, 0, 1, 172, 19, 0, 3});  // source, destination
  want.insert(want.end(), {0xa6, 0x52, 0x00, 0x50});        // 42578, 80
  EXPECT_EQ(h, want);
}

TEST(ProxyProtocol, V2Ipv6CarriesThirtySixAddressBytes) {
  const auto h = Header(ProxyVersion::kV2, V6("2001:db8::1", 443), V6("2001:db8::ff", 8443));
  ASSERT_EQ(h.size(), 16u + 36u);
  EXPECT_EQ(std::vector<uint8_t>(h.begin(), h.begin() + 12), kSignature);
  EXPECT_EQ(h[12], 0x21);
  EXPECT_EQ(h[13], 0x21);  // AF_INET6, STREAM
  EXPECT_EQ(h[14], 0x00);
  EXPECT_EQ(h[15], 36);
  const std::vector<uint8_t> source = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const std::vector<uint8_t> dest = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff};
  EXPECT_EQ(std::vector<uint8_t>(h.begin() + 16, h.begin() + 32), source);
  EXPECT_EQ(std::vector<uint8_t>(h.begin() + 32, h.begin() + 48), dest);
  EXPECT_EQ(std::vector<uint8_t>(h.begin() + 48, h.end()),
            (std::vector<uint8_t>{0x01, 0xbb, 0x20, 0xfb}));  // 443, 8443
  // IPv4-mapped on both ends is an IPv4 connection: AF_INET, 12 bytes.
  const auto mapped = Header(ProxyVersion::kV2, V6("::ffff:10.0.0.7", 1), V6("::ffff:10.0.1.1", 2));
  ASSERT_EQ(mapped.size(), 28u);
  EXPECT_EQ(mapped[13], 0x11);
  EXPECT_EQ(std::vector<uint8_t>(mapped.begin() + 16, mapped.begin() + 24),
            (std::vector<uint8_t>{10, 0, 0, 7, 10, 0, 1, 1}));
}

TEST(ProxyProtocol, V2LocalAndUnknownCarryNoAddress) {
  const ProxyHeader local = MakeProxyLocalHeader();
  std::vector<uint8_t> want = kSignature;
  want.insert(want.end(), {0x20, 0x00, 0x00, 0x00});  // version 2, LOCAL; UNSPEC; length 0
  EXPECT_EQ(std::vector<uint8_t>(local.bytes, local.bytes + local.size), want);
  sockaddr other{};
  other.sa_family = AF_UNIX;
  const ProxyHeader unknown = MakeProxyHeader(ProxyVersion::kV2, &other, &other);
  want = kSignature;
  want.insert(want.end(), {0x21, 0x00, 0x00, 0x00});  // version 2, PROXY; UNSPEC; length 0
  EXPECT_EQ(std::vector<uint8_t>(unknown.bytes, unknown.bytes + unknown.size), want);
}

TEST(ProxyProtocol, NoneWritesNothing) {
  EXPECT_TRUE(Header(ProxyVersion::kNone, V4("10.0.0.1", 1), V4("10.0.0.2", 2)).empty());
  EXPECT_EQ(ProxyVersionName(ProxyVersion::kV1), "v1");
  EXPECT_EQ(ProxyVersionName(ProxyVersion::kV2), "v2");
}

}  // namespace
}  // namespace xdpfwd
