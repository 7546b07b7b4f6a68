// PROXY protocol headers (see proxy_protocol.h), byte for byte as doc/proxy-protocol.txt lays
// them out: v1 a text line, v2 a 16-byte preamble (signature, version and command, family and
// transport, address length) and the addresses and ports in network order.
#include "forwarder/proxy_protocol.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

namespace xdpfwd {
namespace {

constexpr uint8_t kV2Signature[12] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d,
                                      0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};
constexpr uint8_t kV2Proxy = 0x21;  // version 2, command PROXY
constexpr uint8_t kV2Local = 0x20;  // version 2, command LOCAL
constexpr uint8_t kTcp4 = 0x11;     // AF_INET, STREAM
constexpr uint8_t kTcp6 = 0x21;     // AF_INET6, STREAM
constexpr uint8_t kUnspec = 0x00;
constexpr size_t kV1MaxBytes = 107;  // "PROXY TCP6 " two IPv6 addresses, two ports, CRLF
constexpr char kV1Prefix[] = "PROXY ";

// One end as the header names it: its IPv6 form (IPv4 mapped), whether it is IPv4, its port
// in network order.
struct End {
  in6_addr v6{};
  bool ipv4 = false;
  uint16_t port_be = 0;
  bool known = false;
};

End EndOf(const sockaddr* a) {
  End e;
  if (a == nullptr) return e;
  if (a->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(a);
    e.v6.s6_addr[10] = 0xff;
    e.v6.s6_addr[11] = 0xff;
    std::memcpy(&e.v6.s6_addr[12], &in->sin_addr, 4);
    e.ipv4 = true;
    e.port_be = in->sin_port;
    e.known = true;
  } else if (a->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a);
    e.v6 = in6->sin6_addr;
    e.ipv4 = IN6_IS_ADDR_V4MAPPED(&e.v6);
    e.port_be = in6->sin6_port;
    e.known = true;
  }
  return e;
}

void Append(ProxyHeader& h, const void* p, size_t n) {
  std::memcpy(h.bytes + h.size, p, n);
  h.size += n;
}

// The address as v1 writes it; `text` holds INET6_ADDRSTRLEN.
const char* AddressText(const End& e, bool as_ipv4, char* text) {
  if (as_ipv4) return inet_ntop(AF_INET, &e.v6.s6_addr[12], text, INET6_ADDRSTRLEN);
  return inet_ntop(AF_INET6, &e.v6, text, INET6_ADDRSTRLEN);
}

}  // namespace

std::string_view ProxyVersionName(ProxyVersion v) {
  switch (v) {
    case ProxyVersion::kV1:
      return "v1";
    case ProxyVersion::kV2:
      return "v2";
    case ProxyVersion::kNone:
      break;
  }
  return "none";
}

ProxyHeader MakeProxyHeader(ProxyVersion version, const sockaddr* source,
                            const sockaddr* destination) {
  ProxyHeader h;
  const End from = EndOf(source), to = EndOf(destination);
  const bool known = from.known && to.known;
  const bool ipv4 = known && from.ipv4 && to.ipv4;
  if (version == ProxyVersion::kV1) {
    // No allocation: a worker writes this for every connection of the rule.
    char from_text[INET6_ADDRSTRLEN], to_text[INET6_ADDRSTRLEN];
    const int n =
        known
            ? std::snprintf(reinterpret_cast<char*>(h.bytes), sizeof h.bytes,
                            "PROXY %s %s %s %u %u\r\n", ipv4 ? "TCP4" : "TCP6",
                            AddressText(from, ipv4, from_text), AddressText(to, ipv4, to_text),
                            ntohs(from.port_be), ntohs(to.port_be))
            : std::snprintf(reinterpret_cast<char*>(h.bytes), sizeof h.bytes, "PROXY UNKNOWN\r\n");
    h.size = n > 0 ? static_cast<size_t>(n) : 0;
    return h;
  }
  if (version != ProxyVersion::kV2) return h;
  Append(h, kV2Signature, sizeof kV2Signature);
  const uint8_t command = kV2Proxy;
  Append(h, &command, 1);
  const uint8_t family = !known ? kUnspec : ipv4 ? kTcp4 : kTcp6;
  Append(h, &family, 1);
  const uint16_t length = htons(!known ? 0 : ipv4 ? 12 : 36);
  Append(h, &length, 2);
  if (!known) return h;
  if (ipv4) {
    Append(h, &from.v6.s6_addr[12], 4);
    Append(h, &to.v6.s6_addr[12], 4);
  } else {
    Append(h, &from.v6, 16);
    Append(h, &to.v6, 16);
  }
  Append(h, &from.port_be, 2);
  Append(h, &to.port_be, 2);
  return h;
}

ProxyHeader MakeProxyLocalHeader() {
  ProxyHeader h;
  Append(h, kV2Signature, sizeof kV2Signature);
  const uint8_t command = kV2Local, family = kUnspec;
  Append(h, &command, 1);
  Append(h, &family, 1);
  const uint16_t length = 0;
  Append(h, &length, 2);
  return h;
}

namespace {

ProxyParse Invalid(ProxyParse p, const char* why) {
  p.status = ProxyParse::Status::kInvalid;
  p.error = why;
  return p;
}

// A v1 port: 1 to 5 digits, no leading zero, at most 65535.
bool ParsePortText(std::string_view text, uint16_t& port) {
  if (text.empty() || text.size() > 5 || (text.size() > 1 && text[0] == '0')) return false;
  uint32_t n = 0;
  for (char ch : text) {
    if (ch < '0' || ch > '9') return false;
    n = n * 10 + static_cast<uint32_t>(ch - '0');
  }
  if (n > 65535) return false;
  port = static_cast<uint16_t>(n);
  return true;
}

bool ParseAddressText(std::string_view text, bool ipv4, uint16_t port, sockaddr_storage& out) {
  if (text.empty() || text.size() >= INET6_ADDRSTRLEN) return false;
  char buffer[INET6_ADDRSTRLEN];
  std::memcpy(buffer, text.data(), text.size());
  buffer[text.size()] = '\0';
  out = {};
  if (ipv4) {
    auto* in = reinterpret_cast<sockaddr_in*>(&out);
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    return inet_pton(AF_INET, buffer, &in->sin_addr) == 1;
  }
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&out);
  in6->sin6_family = AF_INET6;
  in6->sin6_port = htons(port);
  return inet_pton(AF_INET6, buffer, &in6->sin6_addr) == 1;
}

// "PROXY TCP4 192.0.2.1 198.51.100.1 56324 443\r\n", or "PROXY UNKNOWN...\r\n".
ProxyParse ParseV1(std::span<const uint8_t> bytes) {
  ProxyParse p;
  p.version = 1;
  const size_t window = std::min(bytes.size(), kV1MaxBytes);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), window);
  const size_t end = text.find("\r\n");
  if (end == std::string_view::npos) {
    if (std::any_of(text.begin(), text.end(), [](char ch) { return ch == '\n'; })) {
      return Invalid(p, "a v1 header's line ends with a bare LF");
    }
    if (bytes.size() >= kV1MaxBytes) return Invalid(p, "a v1 header longer than 107 bytes");
    return p;
  }
  std::string_view line = text.substr(0, end);
  line.remove_prefix(sizeof kV1Prefix - 1);
  p.length = end + 2;
  if (line.rfind("UNKNOWN", 0) == 0 && (line.size() == 7 || line[7] == ' ')) {
    p.status = ProxyParse::Status::kComplete;  // the rest of the line is to be ignored
    return p;
  }
  std::string_view words[5];
  size_t n = 0;
  for (size_t start = 0; n < 5;) {
    const size_t space = line.find(' ', start);
    words[n++] = line.substr(start, space == std::string_view::npos ? space : space - start);
    if (space == std::string_view::npos) break;
    start = space + 1;
    if (n == 5) return Invalid(p, "a v1 header with more than six words");
  }
  if (n != 5) return Invalid(p, "a v1 header with fewer than six words");
  if (words[0] != "TCP4" && words[0] != "TCP6") {
    return Invalid(p, "a v1 header whose protocol is not TCP4, TCP6 or UNKNOWN");
  }
  const bool ipv4 = words[0] == "TCP4";
  uint16_t source_port = 0, destination_port = 0;
  if (!ParsePortText(words[3], source_port) || !ParsePortText(words[4], destination_port)) {
    return Invalid(p, "a v1 header's port is not a number from 0 to 65535");
  }
  if (!ParseAddressText(words[1], ipv4, source_port, p.source) ||
      !ParseAddressText(words[2], ipv4, destination_port, p.destination)) {
    return Invalid(p, ipv4 ? "a v1 TCP4 header's address is not IPv4"
                           : "a v1 TCP6 header's address is not IPv6");
  }
  p.has_addresses = true;
  p.status = ProxyParse::Status::kComplete;
  return p;
}

ProxyParse ParseV2(std::span<const uint8_t> bytes) {
  ProxyParse p;
  p.version = 2;
  if (bytes.size() < 16) return p;
  const uint8_t version_command = bytes[12], family = bytes[13];
  if ((version_command >> 4) != 2) return Invalid(p, "a v2 header whose version is not 2");
  const uint8_t command = version_command & 0x0f;
  if (command > 1) return Invalid(p, "a v2 header whose command is neither LOCAL nor PROXY");
  if ((family >> 4) > 3 || (family & 0x0f) > 2) {
    return Invalid(p, "a v2 header with an unknown address family or transport");
  }
  const size_t length = (size_t{bytes[14]} << 8) | bytes[15];
  if (16 + length > kProxyHeaderMaxBytes) {
    return Invalid(p, "a v2 header longer than xdpfwd takes (2,064 bytes)");
  }
  const bool proxy = command == 1;
  const size_t need = !proxy ? 0 : family == kTcp4 ? 12 : family == kTcp6 ? 36 : 0;
  if (length < need) return Invalid(p, "a v2 header too short for its addresses");
  if (bytes.size() < 16 + length) return p;
  p.length = 16 + length;
  p.status = ProxyParse::Status::kComplete;
  if (need == 0) return p;  // LOCAL, UNSPEC, UDP or UNIX: the connection's own ends stand
  const uint8_t* a = bytes.data() + 16;
  if (family == kTcp4) {
    auto* from = reinterpret_cast<sockaddr_in*>(&p.source);
    auto* to = reinterpret_cast<sockaddr_in*>(&p.destination);
    from->sin_family = to->sin_family = AF_INET;
    std::memcpy(&from->sin_addr, a, 4);
    std::memcpy(&to->sin_addr, a + 4, 4);
    std::memcpy(&from->sin_port, a + 8, 2);
    std::memcpy(&to->sin_port, a + 10, 2);
  } else {
    auto* from = reinterpret_cast<sockaddr_in6*>(&p.source);
    auto* to = reinterpret_cast<sockaddr_in6*>(&p.destination);
    from->sin6_family = to->sin6_family = AF_INET6;
    std::memcpy(&from->sin6_addr, a, 16);
    std::memcpy(&to->sin6_addr, a + 16, 16);
    std::memcpy(&from->sin6_port, a + 32, 2);
    std::memcpy(&to->sin6_port, a + 34, 2);
  }
  p.has_addresses = true;
  return p;
}

}  // namespace

ProxyParse ParseProxyHeader(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return ProxyParse{};
  // Which version, as soon as the bytes seen so far can begin only one (or none).
  const size_t v1 = std::min(bytes.size(), sizeof kV1Prefix - 1);
  const size_t v2 = std::min(bytes.size(), sizeof kV2Signature);
  const bool may_be_v1 = std::memcmp(bytes.data(), kV1Prefix, v1) == 0;
  const bool may_be_v2 = std::memcmp(bytes.data(), kV2Signature, v2) == 0;
  if (!may_be_v1 && !may_be_v2) {
    return Invalid(ProxyParse{}, "the connection does not begin with a PROXY header");
  }
  if (may_be_v1) return v1 < sizeof kV1Prefix - 1 ? ProxyParse{} : ParseV1(bytes);
  return v2 < sizeof kV2Signature ? ProxyParse{} : ParseV2(bytes);
}

}  // namespace xdpfwd
