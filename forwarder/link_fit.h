// Whether an interface's packets fit the fast path's AF_XDP frames. Where the sockets are bound
// with XDP_USE_SG (multi-buffer), a packet longer than a frame travels as a descriptor chain
// both ways; where they are not, one packet must fit one frame (the kernel drops a longer one
// on RX). An interface the fast path cannot serve is refused at start, with the fix, and auto
// mode leaves it to the kernel path. The attach mode that serves an interface best is chosen
// here too.
#pragma once

#include <cstdint>
#include <string>

#include "os/result.h"

namespace xdpfwd {

struct LinkFacts {
  std::string ifname;
  std::string driver;           // "veth", "mlx5_core"... (empty: unknown)
  uint32_t mtu = 1500;          // the interface's
  bool generic_xdp = false;     // the steering program runs in generic (SKB) mode
  bool rx_aggregation = false;  // GRO or LRO on: the stack may hand XDP packets above the MTU
  std::string why_generic;      // why native mode was not used (for the message)
  uint32_t rx_frame_bytes = 0;  // the most an AF_XDP frame receives (Ethernet header included)
  bool chains = false;          // the sockets take longer packets as chains (XDP_USE_SG)
  uint32_t tx_frame_bytes = 0;  // the most one TX frame sends (Ethernet header included)
};

// Refuses what the fast path cannot carry: where the sockets take no chains, an MTU whose
// packets do not fit an RX or a TX frame; generic mode where packets larger than the MTU
// arrive and the sockets take no chains (veth, whose peer keeps its TSO in generic mode; any
// interface that aggregates received packets), and generic mode with GRO/LRO on a device
// whose TCP checksums lwIP verifies (a merged packet carries its first segment's checksum).
Result<void> CheckLinkFit(const LinkFacts& link);

// The attach mode that serves an interface best, unless the user chose one: generic on veth
// where the sockets take chains (the peer keeps its TSO, so 64 KiB segments arrive whole: ~40x
// fewer packets for lwIP than native mode's MTU-sized ones, docs/stack.md), native elsewhere.
bool PreferGenericXdp(const std::string& driver, bool chains);

// GRO or LRO is on for `ifname` (ethtool's legacy ioctls).
Result<bool> RxAggregationOn(const std::string& ifname);

// The facts CheckLinkFit needs, the driver and GRO/LRO read from the kernel (unreadable
// aggregation counts as on: refusing is safer than a hang).
LinkFacts ReadLinkFacts(const std::string& ifname, uint32_t mtu, bool generic_xdp,
                        const std::string& why_generic);

}  // namespace xdpfwd
