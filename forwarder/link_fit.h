// Whether an interface's packets fit the fast path's AF_XDP frames. Until multi-buffer lands
// (issue #12), one packet must fit one UMEM frame: a bigger one is dropped by the kernel (a
// socket without XDP_USE_SG), and the connection hangs. So an interface the fast path cannot
// serve is refused at start, with the fix, and auto mode leaves it to the kernel path.
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
};

// Refuses what the fast path cannot receive: an MTU whose frames do not fit rx_frame_bytes, and
// generic mode wherever packets larger than the MTU can arrive (veth, whose peer keeps its TSO
// in generic mode; any interface that aggregates received packets).
Result<void> CheckLinkFit(const LinkFacts& link);

// GRO or LRO is on for `ifname` (ethtool's legacy ioctls).
Result<bool> RxAggregationOn(const std::string& ifname);

// The facts CheckLinkFit needs, the driver and GRO/LRO read from the kernel (unreadable
// aggregation counts as on: refusing is safer than a hang).
LinkFacts ReadLinkFacts(const std::string& ifname, uint32_t mtu, bool generic_xdp,
                        const std::string& why_generic, uint32_t rx_frame_bytes);

}  // namespace xdpfwd
