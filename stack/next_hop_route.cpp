#include "stack/next_hop_route.h"

#include <netinet/in.h>

#include <cstring>

namespace xdpfwd {
namespace {

constexpr size_t kEthernetHeader = 14;
constexpr size_t kTcpFlagsAt = 13;
constexpr uint8_t kTcpSyn = 0x02;

}  // namespace

NextHopRoute::NextHopRoute(int ifindex, in_addr addr, in_addr netmask, in_addr gateway)
    : addr_(addr), netmask_(netmask), gateway_(gateway), next_hops_(ifindex) {}

bool NextHopRoute::OnLink(in_addr a) const {
  return gateway_.s_addr == 0 || (a.s_addr & netmask_.s_addr) == (addr_.s_addr & netmask_.s_addr);
}

void NextHopRoute::LearnFromSyn(const uint8_t* frame, size_t len, uint64_t now_ms) {
  const uint8_t* ip = frame + kEthernetHeader;
  if (len < kEthernetHeader + 20 || ip[9] != IPPROTO_TCP) return;
  const size_t ihl = (ip[0] & 0x0fu) * 4u;
  if (len < kEthernetHeader + ihl + kTcpFlagsAt + 1 || (ip[ihl + kTcpFlagsAt] & kTcpSyn) == 0) {
    return;
  }
  in_addr source{};
  std::memcpy(&source.s_addr, ip + 12, sizeof(source.s_addr));
  if (!OnLink(source)) return;  // behind a gateway: the frame's source is the gateway's MAC
  MacAddress mac;
  std::memcpy(mac.data(), frame + 6, mac.size());
  next_hops_.Learn(source, mac, now_ms);
}

}  // namespace xdpfwd
