// The PROXY protocol (HAProxy's doc/proxy-protocol.txt). Sending: the header a backend reads
// first on a rule with [proxy=v1|v2], naming the client and the address it connected to, so that
// the backend sees who its client is through the forwarder. Receiving: on a rule with
// [accept-proxy], the header a proxy in front of xdpfwd sends first, naming the client behind it.
// Both paths do both.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <span>
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

// The longest header [accept-proxy] takes: v2's 16-byte preamble and 2,048 bytes after it
// (addresses and TLVs; the specification allows 65,535, HAProxy takes what fits its buffer). A
// longer one is refused as invalid. v1's line is at most 107 bytes.
inline constexpr size_t kProxyHeaderMaxBytes = 16 + 2048;

// What a connection's first bytes say, read as a PROXY header of either version.
struct ProxyParse {
  enum class Status : uint8_t {
    kIncomplete,  // a valid header's beginning so far: wait for more
    kComplete,    // a whole valid header: `length` bytes, the stream's own bytes after them
    kInvalid,     // not a valid header: refuse the connection
  };
  Status status = Status::kIncomplete;
  size_t length = 0;    // kComplete
  uint8_t version = 0;  // 1 or 2, once the first bytes tell
  // kComplete: whether the header names the client (v1 TCP4/TCP6, v2 PROXY over TCP4/TCP6).
  // Otherwise (v1 UNKNOWN, v2 LOCAL, v2 UNSPEC or a family that is not TCP over IP) the
  // connection's own ends stand, as the specification asks of a receiver.
  bool has_addresses = false;
  sockaddr_storage source{}, destination{};  // AF_INET or AF_INET6 with their ports
  const char* error = "";                    // kInvalid: what is wrong, for the log
};

// `bytes`: what the connection sent so far (at least kProxyHeaderMaxBytes of it when it sent
// that much). Decides as early as the bytes allow: a first byte that begins neither version is
// kInvalid at once.
ProxyParse ParseProxyHeader(std::span<const uint8_t> bytes);

}  // namespace xdpfwd
