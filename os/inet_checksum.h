// The Internet checksum (RFC 1071) written once: the transmit path's IPv4 header checksum and
// TCP pseudo-header sums of both families (stack/packet_tx.cpp, stack/lwip_netif.cpp) and the
// tests' packet builder and checks use it.
// (The steering program, a BPF object, cannot include C++; it checks no checksum.)
#pragma once

#include <cstddef>
#include <cstdint>

namespace xdpfwd {

// `sum` plus `data`'s bytes as big-endian 16-bit words, an odd last byte padded with a zero.
// Not folded: up to 64 KiB of data plus a pseudo-header cannot overflow 32 bits.
inline uint32_t InetSum(const uint8_t* data, size_t len, uint32_t sum = 0) {
  for (size_t i = 0; i + 1 < len; i += 2) sum += static_cast<uint32_t>(data[i] << 8 | data[i + 1]);
  if (len & 1) sum += static_cast<uint32_t>(data[len - 1] << 8);
  return sum;
}

// A 32-bit sum folded into 16 bits, carries added back in (not complemented).
inline uint16_t InetFold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(sum);
}

// The checksum to store (host order): the complement of the folded sum. Over data that holds a
// correct checksum (and the same `sum`), it is 0.
inline uint16_t InetChecksum(const uint8_t* data, size_t len, uint32_t sum = 0) {
  return static_cast<uint16_t>(~InetFold(InetSum(data, len, sum)));
}

// The TCP/UDP pseudo-header's sum for an IPv4 packet whose header starts at `ip`: source and
// destination addresses, protocol and the transport length.
inline uint32_t Ipv4PseudoHeaderSum(const uint8_t* ip, uint8_t protocol, uint32_t length) {
  return InetSum(ip + 12, 8, uint32_t{protocol} + length);
}

// The same for an IPv6 packet whose fixed header starts at `ip` (RFC 8200 section 8.1): source
// and destination addresses (bytes 8-39), the upper-layer length as 32 bits and the next
// header, which for TCP follows the fixed header directly (lwIP sends no extension headers).
inline uint32_t Ipv6PseudoHeaderSum(const uint8_t* ip, uint8_t next_header, uint32_t length) {
  return InetSum(ip + 8, 32, uint32_t{next_header} + (length >> 16) + (length & 0xffff));
}

}  // namespace xdpfwd
