// The receiving side of the PROXY protocol ([accept-proxy]): headers written out byte for byte
// from HAProxy's doc/proxy-protocol.txt, their every prefix, and the ways a header can be wrong.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <string>
#include <vector>

#include "forwarder/proxy_protocol.h"

namespace xdpfwd {
namespace {

using Status = ProxyParse::Status;

std::vector<uint8_t> Bytes(const std::string& text) { return {text.begin(), text.end()}; }

ProxyParse Parse(const std::vector<uint8_t>& b) { return ParseProxyHeader(b); }

std::string Text(const sockaddr_storage& a) {
  char text[INET6_ADDRSTRLEN] = "";
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    inet_ntop(AF_INET, &in.sin_addr, text, sizeof text);
    return std::string(text) + ":" + std::to_string(ntohs(in.sin_port));
  }
  if (a.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
    inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof text);
    return "[" + std::string(text) + "]:" + std::to_string(ntohs(in6.sin6_port));
  }
  return "none";
}

const std::vector<uint8_t> kSignature = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d,
                                         0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};

std::vector<uint8_t> V2(std::vector<uint8_t> rest) {
  std::vector<uint8_t> out = kSignature;
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

// Every proper prefix of a valid header is the beginning of one: wait for more.
void ExpectEveryPrefixIncomplete(const std::vector<uint8_t>& header) {
  for (size_t n = 0; n < header.size(); ++n) {
    const std::vector<uint8_t> prefix(header.begin(), header.begin() + n);
    EXPECT_EQ(Parse(prefix).status, Status::kIncomplete) << "after " << n << " bytes";
  }
}

TEST(ProxyParse, V1Tcp4NamesTheClientAndLeavesTheStreamsBytes) {
  const std::string line = "PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n";
  const ProxyParse p = Parse(Bytes(line + "GET / HTTP/1.0\r\n"));
  ASSERT_EQ(p.status, Status::kComplete) << p.error;
  EXPECT_EQ(p.version, 1);
  EXPECT_EQ(p.length, line.size());
  ASSERT_TRUE(p.has_addresses);
  EXPECT_EQ(Text(p.source), "192.168.0.1:56324");
  EXPECT_EQ(Text(p.destination), "192.168.0.11:443");
  ExpectEveryPrefixIncomplete(Bytes(line));
}

TEST(ProxyParse, V1Tcp6AndUnknown) {
  const ProxyParse six = Parse(Bytes("PROXY TCP6 2001:db8::1 2001:db8::2 40000 80\r\n"));
  ASSERT_EQ(six.status, Status::kComplete) << six.error;
  EXPECT_EQ(Text(six.source), "[2001:db8::1]:40000");
  EXPECT_EQ(Text(six.destination), "[2001:db8::2]:80");
  // UNKNOWN: whatever follows on the line is ignored, and the connection's own ends stand.
  for (const std::string line : {"PROXY UNKNOWN\r\n", "PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n"}) {
    const ProxyParse u = Parse(Bytes(line + "x"));
    ASSERT_EQ(u.status, Status::kComplete) << line;
    EXPECT_EQ(u.length, line.size());
    EXPECT_FALSE(u.has_addresses);
  }
}

TEST(ProxyParse, V1MalformedIsRefused) {
  for (const std::string line : {
           "PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n",      // no such protocol
           "PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",        // a word short
           "PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",    // a word too many
           "PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n",     // two blanks
           "PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n",  // past 65535
           "PROXY TCP4 1.2.3.4 5.6.7.8 080 2\r\n",    // a leading zero
           "PROXY TCP4 2001:db8::1 5.6.7.8 1 2\r\n",  // IPv6 under TCP4
           "PROXY TCP6 1.2.3.4 2001:db8::1 1 2\r\n",  // IPv4 under TCP6
           "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n",        // a bare LF
           "PROXY TCP4 1.2.3.256 5.6.7.8 1 2\r\n",    // not an address
           "PROXY UNKNOWNX\r\n",                      // not UNKNOWN
       }) {
    const ProxyParse p = Parse(Bytes(line));
    EXPECT_EQ(p.status, Status::kInvalid) << line;
    EXPECT_NE(std::string(p.error), "") << line;
  }
  // 107 bytes without a CRLF: no v1 line is longer.
  EXPECT_EQ(Parse(Bytes("PROXY UNKNOWN " + std::string(92, 'a'))).status, Status::kIncomplete);
  EXPECT_EQ(Parse(Bytes("PROXY UNKNOWN " + std::string(93, 'a'))).status, Status::kInvalid);
}

TEST(ProxyParse, NeitherVersionIsRefusedAtItsFirstDifferentByte) {
  EXPECT_EQ(Parse(Bytes("G")).status, Status::kInvalid);
  EXPECT_EQ(Parse(Bytes("PROXX")).status, Status::kInvalid);
  EXPECT_EQ(Parse(Bytes("PROXY")).status, Status::kIncomplete);
  EXPECT_EQ(Parse({0x0d, 0x0a, 0x0d, 0x0a, 0x01}).status, Status::kInvalid);
  EXPECT_EQ(Parse({}).status, Status::kIncomplete);
}

TEST(ProxyParse, V2Ipv4) {
  // The bytes of the sending side's test (a header HAProxy wrote), then the stream's own.
  std::vector<uint8_t> h =
      V2({0x21, 0x11, 0x00, 0x0c, 172, 19, 0, 1, 172, 19, 0, 3, 0xa6, 0x52, 0x00, 0x50});
  ExpectEveryPrefixIncomplete(h);
  h.push_back('x');
  const ProxyParse p = Parse(h);
  ASSERT_EQ(p.status, Status::kComplete) << p.error;
  EXPECT_EQ(p.version, 2);
  EXPECT_EQ(p.length, 28u);
  ASSERT_TRUE(p.has_addresses);
  EXPECT_EQ(Text(p.source), "172.19.0.1:42578");
  EXPECT_EQ(Text(p.destination), "172.19.0.3:80");
}

TEST(ProxyParse, V2Ipv6WithTlvsAfterTheAddresses) {
  std::vector<uint8_t> rest = {0x21, 0x21, 0x00, 36 + 7};
  for (int i = 0; i < 16; ++i) rest.push_back(i == 0 ? 0x20 : i == 1 ? 0x01 : i == 15 ? 1 : 0);
  for (int i = 0; i < 16; ++i) rest.push_back(i == 0 ? 0x20 : i == 1 ? 0x01 : i == 15 ? 2 : 0);
  rest.insert(rest.end(), {0x01, 0xbb, 0x20, 0xfb});                // 443, 8443
  rest.insert(rest.end(), {0x01, 0x00, 0x04, 'h', '2', 'h', '2'});  // PP2_TYPE_ALPN, 4 bytes
  const std::vector<uint8_t> h = V2(rest);
  ExpectEveryPrefixIncomplete(h);
  const ProxyParse p = Parse(h);
  ASSERT_EQ(p.status, Status::kComplete) << p.error;
  EXPECT_EQ(p.length, 16u + 43u);
  EXPECT_EQ(Text(p.source), "[2001::1]:443");
  EXPECT_EQ(Text(p.destination), "[2001::2]:8443");
}

TEST(ProxyParse, V2LocalUnspecAndOtherFamiliesKeepTheConnectionsEnds) {
  for (const std::vector<uint8_t>& rest : std::vector<std::vector<uint8_t>>{
           {0x20, 0x00, 0x00, 0x00},                                      // LOCAL, UNSPEC
           {0x20, 0x11, 0x00, 0x0c, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 0, 2},  // LOCAL, addresses too
           {0x21, 0x00, 0x00, 0x00},                                      // PROXY, UNSPEC
           {0x21, 0x12, 0x00, 0x0c, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 0, 2},  // PROXY, UDP over IPv4
       }) {
    const ProxyParse p = Parse(V2(rest));
    ASSERT_EQ(p.status, Status::kComplete) << p.error;
    EXPECT_EQ(p.length, 16u + rest[3]);
    EXPECT_FALSE(p.has_addresses);
  }
}

TEST(ProxyParse, V2MalformedIsRefused) {
  for (const std::vector<uint8_t>& rest : std::vector<std::vector<uint8_t>>{
           {0x11, 0x11, 0x00, 0x0c},  // version 1 in the version nibble
           {0x22, 0x11, 0x00, 0x0c},  // command 2
           {0x21, 0x41, 0x00, 0x0c},  // family 4
           {0x21, 0x13, 0x00, 0x0c},  // transport 3
           {0x21, 0x11, 0x00, 0x08},  // too short for two IPv4 addresses and ports
           {0x21, 0x21, 0x00, 0x0c},  // too short for IPv6
           {0x21, 0x11, 0x08, 0x01},  // 2,049 bytes after the preamble: more than xdpfwd takes
       }) {
    const ProxyParse p = Parse(V2(rest));
    EXPECT_EQ(p.status, Status::kInvalid) << int(rest[0]) << " " << int(rest[1]);
  }
  // The longest it takes: 2,048 bytes after the preamble.
  std::vector<uint8_t> longest = V2({0x21, 0x11, 0x08, 0x00});
  longest.resize(kProxyHeaderMaxBytes, 0);
  EXPECT_EQ(Parse(longest).status, Status::kComplete);
}

TEST(ProxyParse, ReadsBackWhatTheSendingSideWrites) {
  sockaddr_in6 from{}, to{};
  from.sin6_family = to.sin6_family = AF_INET6;
  inet_pton(AF_INET6, "2001:db8::7", &from.sin6_addr);
  inet_pton(AF_INET6, "2001:db8::8", &to.sin6_addr);
  from.sin6_port = htons(1234);
  to.sin6_port = htons(9000);
  for (ProxyVersion v : {ProxyVersion::kV1, ProxyVersion::kV2}) {
    const ProxyHeader h = MakeProxyHeader(v, reinterpret_cast<const sockaddr*>(&from),
                                          reinterpret_cast<const sockaddr*>(&to));
    const ProxyParse p = ParseProxyHeader({h.bytes, h.size});
    ASSERT_EQ(p.status, Status::kComplete) << ProxyVersionName(v) << ": " << p.error;
    EXPECT_EQ(p.length, h.size);
    EXPECT_EQ(Text(p.source), "[2001:db8::7]:1234");
    EXPECT_EQ(Text(p.destination), "[2001:db8::8]:9000");
  }
}

}  // namespace
}  // namespace xdpfwd
