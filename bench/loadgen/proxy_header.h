// The receiving side of the PROXY protocol (HAProxy's doc/proxy-protocol.txt), for serve
// --accept-proxy: how much of a connection's first bytes is a valid v1 or v2 header. Written
// apart from the forwarder's writer (forwarder/proxy_protocol.h), which the load generator
// must not link: the test reads what that writer sends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace xdpfwd::loadgen {

// v1's longest line, CRLF included ("PROXY TCP6 " and two full IPv6 addresses and ports).
inline constexpr size_t kProxyV1MaxBytes = 107;
// v2's 16-byte preamble: signature, version and command, family and transport, length.
inline constexpr size_t kProxyV2PreambleBytes = 16;
// The longest header of either version: a v2 preamble and a 16-bit length's worth after it.
inline constexpr size_t kProxyMaxBytes = kProxyV2PreambleBytes + 0xffff;

struct ProxyScan {
  enum class Status {
    kIncomplete,  // a valid header's beginning so far: read more
    kComplete,    // a whole valid header: `length` bytes, the stream's own bytes after them
    kInvalid,     // not a PROXY header (or not one this reader accepts): close the connection
  };
  Status status = Status::kIncomplete;
  size_t length = 0;  // kComplete only
  int version = 0;    // 1 or 2 once known
};

// `bytes`: everything the connection has sent so far. Decides as early as the bytes allow: a
// first byte that starts neither version is kInvalid at once, not after 107 bytes.
ProxyScan ScanProxyHeader(std::span<const uint8_t> bytes);

}  // namespace xdpfwd::loadgen
