// Where a packet the fast path sends on one interface goes next: straight to an on-link
// destination, through the gateway otherwise, and to which Ethernet address (NextHopCache:
// learned from the peers' SYNs, else asked of the kernel). IPv4 and IPv6 alike; an IPv6
// gateway is usually a router's link-local address, and a link-local destination is always
// on-link. The netif's transmit asks it once per packet and its receive shows it each frame
// that may teach it a neighbour; what the netif then does with the packet (an AF_XDP frame, a
// chain, the packet socket) is the netif's own.
#pragma once

#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "stack/neighbor.h"
#include "stack/next_hop_cache.h"

namespace xdpfwd {

// An interface's IPv6 side, as its IPv4 side is an address, a mask and a gateway.
struct Ipv6Interface {
  in6_addr addr{};           // :: : the interface has no IPv6 address for the fast path
  uint8_t prefix_len = 128;  // what is on-link besides link-local addresses
  in6_addr gateway{};        // :: : everything is on-link
  bool enabled() const { return !IN6_IS_ADDR_UNSPECIFIED(&addr); }
};

class NextHopRoute {
 public:
  // `addr`/`netmask`: the interface's own address and the mask of what is on-link;
  // `gateway` 0: everything is on-link (the client side's /32 with no gateway).
  NextHopRoute(int ifindex, in_addr addr, in_addr netmask, in_addr gateway,
               const Ipv6Interface& ipv6 = {});

  // Reached without the gateway: the next hop is the address itself.
  bool OnLink(in_addr a) const;
  bool OnLink(const in6_addr& a) const;
  in_addr NextHop(in_addr destination) const {
    return OnLink(destination) ? destination : gateway_;
  }
  in6_addr NextHop(const in6_addr& destination) const {
    return OnLink(destination) ? destination : ipv6_.gateway;
  }
  // The next hop's Ethernet address for a packet to `destination`; none while it is unknown
  // (the kernel has been asked to resolve it: the caller keeps the packet and tries later).
  std::optional<MacAddress> Resolve(in_addr destination, uint64_t now_ms) {
    return next_hops_.Lookup(IpAddress::V4(NextHop(destination)), now_ms);
  }
  std::optional<MacAddress> Resolve(const in6_addr& destination, uint64_t now_ms) {
    return next_hops_.Lookup(IpAddress::V6(NextHop(destination)), now_ms);
  }
  // A received frame (from its Ethernet header): a SYN or SYN-ACK from an on-link peer
  // teaches its Ethernet source address, at no cost per data frame. IPv4 or IPv6 (TCP right
  // after the fixed header: the steering program passes extension headers to the kernel).
  void LearnFromSyn(const uint8_t* frame, size_t len, uint64_t now_ms);

  const NextHopCache& next_hops() const { return next_hops_; }
  // The interface's first IPv6 address, given after the start (LwipNetif::AddIpv6).
  void SetIpv6(const Ipv6Interface& ipv6) { ipv6_ = ipv6; }

 private:
  in_addr addr_, netmask_, gateway_;
  Ipv6Interface ipv6_;
  NextHopCache next_hops_;
};

}  // namespace xdpfwd
