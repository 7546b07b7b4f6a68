// PROXY protocol headers (see proxy_protocol.h), byte for byte as doc/proxy-protocol.txt lays
// them out: v1 a text line, v2 a 16-byte preamble (signature, version and command, family and
// transport, address length) and the addresses and ports in network order.
#include "forwarder/proxy_protocol.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdio>
#include <cstring>

namespace xdpfwd {
namespace {

constexpr uint8_t kV2Signature[12] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d,
                                      0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};
constexpr uint8_t kV2Proxy = 0x21;  // version 2, command PROXY
constexpr uint8_t kV2Local = 0x20;  // version 2, command LOCAL
constexpr uint8_t kTcp4 = 0x11;     // AF_INET, STREAM
constexpr uint8_t kTcp6 = 0x21;     // AF_INET6, STREAM
constexpr uint8_t kUnspec = 0x00;

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

}  // namespace xdpfwd
