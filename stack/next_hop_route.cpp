#include "stack/next_hop_route.h"

#include <netinet/in.h>

#include <cstring>

namespace xdpfwd {
namespace {

constexpr size_t kEthernetHeader = 14;
constexpr size_t kIpv6Header = 40;
constexpr size_t kTcpFlagsAt = 13;
constexpr uint8_t kTcpSyn = 0x02;

}  // namespace

NextHopRoute::NextHopRoute(int ifindex, in_addr addr, in_addr netmask, in_addr gateway,
                           const Ipv6Interface& ipv6)
    : addr_(addr), netmask_(netmask), gateway_(gateway), ipv6_(ipv6), next_hops_(ifindex) {}

bool NextHopRoute::OnLink(in_addr a) const {
  return gateway_.s_addr == 0 || (a.s_addr & netmask_.s_addr) == (addr_.s_addr & netmask_.s_addr);
}

bool NextHopRoute::OnLink(const in6_addr& a) const {
  // fe80::/10 is on every link (RFC 4291 2.5.6): a link-local peer is its own next hop.
  if (IN6_IS_ADDR_LINKLOCAL(&a) || IN6_IS_ADDR_UNSPECIFIED(&ipv6_.gateway)) return true;
  const uint8_t bits = ipv6_.prefix_len > 128 ? 128 : ipv6_.prefix_len;
  const size_t whole = bits / 8;
  if (std::memcmp(a.s6_addr, ipv6_.addr.s6_addr, whole) != 0) return false;
  if (bits % 8 == 0) return true;
  const auto mask = static_cast<uint8_t>(0xff00u >> (bits % 8));
  return ((a.s6_addr[whole] ^ ipv6_.addr.s6_addr[whole]) & mask) == 0;
}

void NextHopRoute::LearnFromSyn(const uint8_t* frame, size_t len, uint64_t now_ms) {
  if (len < kEthernetHeader + 20) return;
  const uint8_t* ip = frame + kEthernetHeader;
  MacAddress mac;
  std::memcpy(mac.data(), frame + 6, mac.size());
  if (frame[12] == 0x86 && frame[13] == 0xdd) {
    if (len < kEthernetHeader + kIpv6Header + kTcpFlagsAt + 1 || ip[6] != IPPROTO_TCP ||
        (ip[kIpv6Header + kTcpFlagsAt] & kTcpSyn) == 0) {
      return;
    }
    in6_addr source;
    std::memcpy(&source, ip + 8, sizeof(source));
    // Behind a gateway the frame's source is the router's MAC, not the peer's.
    if (OnLink(source)) next_hops_.Learn(IpAddress::V6(source), mac, now_ms);
    return;
  }
  if (ip[9] != IPPROTO_TCP) return;
  const size_t ihl = (ip[0] & 0x0fu) * 4u;
  if (len < kEthernetHeader + ihl + kTcpFlagsAt + 1 || (ip[ihl + kTcpFlagsAt] & kTcpSyn) == 0) {
    return;
  }
  in_addr source{};
  std::memcpy(&source.s_addr, ip + 12, sizeof(source.s_addr));
  if (!OnLink(source)) return;  // behind a gateway: the frame's source is the gateway's MAC
  next_hops_.Learn(source, mac, now_ms);
}

}  // namespace xdpfwd
