// The PROXY protocol (HAProxy's doc/proxy-protocol.txt), the sending side: the header a backend
// reads first on a rule with [proxy=v1|v2], naming the client and the address it connected to,
// so that the backend sees who its client is through the forwarder. Both paths send it.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace xdpfwd {

enum class ProxyVersion : uint8_t { kNone, kV1, kV2 };
std::string_view ProxyVersionName(ProxyVersion v);  // "none", "v1", "v2"

// One header, at most 107 bytes (v1's longest line, "PROXY TCP6 ..." with both addresses at
// their longest; v2 is 16 + 36 bytes for IPv6).
struct ProxyHeader {
  static constexpr size_t kMaxBytes = 108;
  uint8_t bytes[kMaxBytes];
  size_t size = 0;
};

// The header for a client `source` that connected to `destination` (AF_INET or AF_INET6
// sockaddrs). Both IPv4, or IPv4-mapped IPv6 (a dual-stack listener's IPv4 client): TCP4, with
// the IPv4 addresses; otherwise TCP6, an IPv4 address given IPv4-mapped. Another family: v1's
// "PROXY UNKNOWN", v2's PROXY command with the UNSPEC family and no addresses.
ProxyHeader MakeProxyHeader(ProxyVersion version, const sockaddr* source,
                            const sockaddr* destination);
// v2's LOCAL command: a connection of the forwarder's own (a health check), no addresses.
ProxyHeader MakeProxyLocalHeader();

}  // namespace xdpfwd
