// Where a packet the fast path sends on one interface goes next: straight to an on-link
// destination, through the gateway otherwise, and to which Ethernet address (NextHopCache:
// learned from the peers' SYNs, else asked of the kernel). The netif's transmit asks it once per
// packet and its receive shows it each frame that may teach it a neighbour; what the netif then
// does with the packet (an AF_XDP frame, a chain, the packet socket) is the netif's own.
#pragma once

#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "stack/neighbor.h"
#include "stack/next_hop_cache.h"

namespace xdpfwd {

class NextHopRoute {
 public:
  // `addr`/`netmask`: the interface's own address and the mask of what is on-link;
  // `gateway` 0: everything is on-link (the client side's /32 with no gateway).
  NextHopRoute(int ifindex, in_addr addr, in_addr netmask, in_addr gateway);

  // Reached without the gateway: the next hop is the address itself.
  bool OnLink(in_addr a) const;
  in_addr NextHop(in_addr destination) const {
    return OnLink(destination) ? destination : gateway_;
  }
  // The next hop's Ethernet address for a packet to `destination`; none while it is unknown
  // (the kernel has been asked to resolve it: the caller keeps the packet and tries later).
  std::optional<MacAddress> Resolve(in_addr destination, uint64_t now_ms) {
    return next_hops_.Lookup(NextHop(destination), now_ms);
  }
  // A received frame (from its Ethernet header): a SYN or SYN-ACK from an on-link peer
  // teaches its Ethernet source address, at no cost per data frame.
  void LearnFromSyn(const uint8_t* frame, size_t len, uint64_t now_ms);

  const NextHopCache& next_hops() const { return next_hops_; }

 private:
  in_addr addr_, netmask_, gateway_;
  NextHopCache next_hops_;
};

}  // namespace xdpfwd
