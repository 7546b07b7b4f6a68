// Receive-side scaling as a NIC computes it: the Toeplitz hash of a packet's addresses and
// ports, and the device's key and indirection table (ETHTOOL_GRSSH, what `ethtool -x` shows)
// that turn the hash into an rx queue. Lets a worker pick backend-leg ports whose return
// traffic lands on its own queues (forwarder/backend_ports.h). Built, not yet wired.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "os/result.h"

namespace xdpfwd {

// Microsoft's default 40-byte key (the RSS verification suite's; many drivers' default too).
inline constexpr uint8_t kDefaultRssKey[40] = {
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3,
    0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3,
    0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};

// The Toeplitz hash of `input` under `key`: for every set bit of the input, the 32 key bits
// starting at that bit position are XORed in. The key must be at least input + 4 bytes.
uint32_t ToeplitzHash(std::span<const uint8_t> key, std::span<const uint8_t> input);

// IPv4/TCP as the NIC hashes a received packet: source address, destination address, source
// port, destination port, all as on the wire. Ports in host order here.
uint32_t ToeplitzIpv4Tcp(std::span<const uint8_t> key, in_addr saddr, in_addr daddr, uint16_t sport,
                         uint16_t dport);
// IPv6/TCP the same way: the two 16-byte addresses, then the ports; 36 bytes of input, which a
// 40-byte key covers exactly.
uint32_t ToeplitzIpv6Tcp(std::span<const uint8_t> key, const in6_addr& saddr, const in6_addr& daddr,
                         uint16_t sport, uint16_t dport);

struct RssTable {
  std::vector<uint8_t> key;
  std::vector<uint32_t> indirection;  // hash → queue: indirection[hash % size]

  uint32_t QueueOf(uint32_t hash) const {
    return indirection[hash % indirection.size()];  // sizes are powers of two: the low bits
  }
};

// The device's Toeplitz key and indirection table. An error whose code is
// std::errc::operation_not_supported when the device has none to give (veth: its rx queue is
// the sender's transmit queue, not a hash of ours); any other error when it has one we cannot
// use (another hash function, a symmetric input transform) or could not read.
Result<RssTable> ReadRssTable(const std::string& ifname);
bool RssUnavailable(const Error& error);

}  // namespace xdpfwd
