// Kernel routes, neighbour (ARP) entries and interface facts, read over rtnetlink. The userspace
// stack has no ARP of its own: the kernel stays the control plane and we consult its tables.
#pragma once

#include <netinet/in.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "os/ip_address.h"
#include "os/result.h"

namespace xdpfwd {

struct Route {
  int oif = 0;
  std::string ifname;
  in_addr gateway{};   // 0 if the destination is on-link
  in_addr prefsrc{};   // 0 if the kernel chose none
  in_addr next_hop{};  // gateway, or the destination itself when on-link
};

using MacAddress = std::array<uint8_t, 6>;

// The same for an IPv6 destination. An IPv6 gateway is usually a router's link-local address,
// which means something only together with `oif`.
struct Route6 {
  int oif = 0;
  std::string ifname;
  in6_addr gateway{};   // :: if the destination is on-link
  in6_addr prefsrc{};   // :: if the kernel chose none
  in6_addr next_hop{};  // gateway, or the destination itself when on-link
};

// An interface's IPv6 address as the fast path serves it: global scope, not tentative.
struct InterfaceAddress6 {
  in6_addr addr{};
  uint8_t prefix_len = 128;
};

// "02:00:5e:10:00:01".
std::string FormatMac(const MacAddress& mac);

// The kernel's route to dst, like `ip route get`. Only unicast routes through an interface count:
// unreachable, blackhole, prohibit, local and broadcast destinations are errors.
Result<Route> LookupRoute(in_addr dst);
// The kernel's route to an IPv6 dst (`ip -6 route get`), with the same refusals.
Result<Route6> LookupRoute(const in6_addr& dst);

// The kernel's neighbour entry for addr (either family; an in_addr converts) on ifindex. nullopt
// if there is none or it is not usable (INCOMPLETE, FAILED, NONE); REACHABLE, STALE, DELAY,
// PROBE, PERMANENT and NOARP are usable.
Result<std::optional<MacAddress>> LookupNeighbor(int ifindex, const IpAddress& addr);

// Asks the kernel to resolve addr on ifindex (RTM_NEWNEIGH with NTF_USE): it sends an ARP request
// or a neighbour solicitation now, or re-confirms a STALE entry; no data packet is involved.
// Returns at once. A PERMANENT or NOARP entry is left alone (NTF_USE would turn a static entry
// into a dynamic one).
Result<void> RequestNeighborResolution(int ifindex, const IpAddress& addr);

// Looks up, requests resolution if needed and polls until the entry is usable or timeout passes.
// Sleeps between polls: for the set-up path only, never the worker loop.
Result<MacAddress> ResolveNeighbor(int ifindex, const IpAddress& addr,
                                   std::chrono::milliseconds timeout);

// The interface that holds local address addr: {ifindex, name}.
Result<std::pair<int, std::string>> InterfaceWithAddress(in_addr addr);
// The same for an IPv6 address, with that address's on-link prefix length. A tentative address
// (duplicate address detection not done) or one whose detection failed is refused: lwIP would
// answer on an address the kernel does not own yet.
struct InterfaceHolding6 {
  int ifindex = 0;
  std::string name;
  uint8_t prefix_len = 128;
};
Result<InterfaceHolding6> InterfaceWithAddress(const in6_addr& addr);

// The interface's first global IPv6 address that has passed duplicate address detection, and
// its prefix length (what is on-link); an error if it has none.
Result<InterfaceAddress6> InterfaceIpv6Address(int ifindex);

// The Ethernet address of an interface (an error for non-Ethernet links such as lo or tun).
Result<MacAddress> InterfaceMac(int ifindex);
Result<int> InterfaceMtu(int ifindex);

// The interface's driver as ethtool reports it ("veth", "mlx5_core", ...).
Result<std::string> InterfaceDriver(const std::string& ifname);

}  // namespace xdpfwd
