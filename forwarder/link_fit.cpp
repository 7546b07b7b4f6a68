// The fast path's frame-fit policy; see link_fit.h.
#include "forwarder/link_fit.h"

#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "stack/neighbor.h"

namespace xdpfwd {
namespace {

constexpr uint32_t kEthernetHeader = 14;
// Native XDP on veth hands a program a packet in one buffer up to a peer MTU of PAGE_SIZE -
// XDP_PACKET_HEADROOM (256) - sizeof(skb_shared_info) (320) - ETH_HLEN: 3506 with 4 KiB pages
// (veth_xdp_set refuses more for a program without xdp.frags; checked on 6.18). Above it the
// packet comes in several buffers, which a socket without XDP_USE_SG drops.
constexpr uint32_t kVethNativeMaxMtu = 3506;

std::string Fixes(const std::string& ifname, uint32_t max_mtu) {
  return "lower the MTU (ip link set dev " + ifname + " mtu " + std::to_string(max_mtu) +
         ", on the peer too), or use --path kernel (--path auto leaves this interface's "
         "traffic to the kernel path)";
}

}  // namespace

Result<void> CheckLinkFit(const LinkFacts& link) {
  const bool veth = link.driver == "veth";
  const auto limit = [](uint32_t frame) {
    return frame > kEthernetHeader ? frame - kEthernetHeader : 0;
  };
  // With chains a packet may take up to kMaxRxChain frames either way, above any MTU an IP
  // packet allows (65535); without, one frame.
  if (!link.chains) {
    const uint32_t tx_max_mtu = limit(link.tx_frame_bytes);
    uint32_t max_mtu = std::min(limit(link.rx_frame_bytes), tx_max_mtu);
    if (veth) max_mtu = std::min(max_mtu, kVethNativeMaxMtu);
    if (link.mtu > max_mtu) {
      const bool rx = max_mtu < tx_max_mtu;
      return Error{{},
                   link.ifname + ": MTU " + std::to_string(link.mtu) + " is above the " +
                       std::to_string(max_mtu) + " the fast path can " + (rx ? "receive" : "send") +
                       " (one packet per " +
                       std::to_string(rx ? link.rx_frame_bytes : link.tx_frame_bytes) +
                       "-byte AF_XDP frame with --tune multi-buffer=off" +
                       (veth && rx ? ", and native XDP on veth stops at 3506" : "") + "); " +
                       Fixes(link.ifname, max_mtu)};
    }
  }
  if (!link.generic_xdp) return {};
  const std::string mode =
      link.ifname + ": XDP runs in generic mode" +
      (link.why_generic.empty() ? std::string() : " (" + link.why_generic + ")");
  if (veth) {
    if (link.chains) return {};  // veth's checksums are not verified (CHECKSUM_PARTIAL)
    return Error{{},
                 mode +
                     ", where the veth peer keeps its TSO: 64 KiB packets arrive that do not fit "
                     "a " +
                     std::to_string(link.rx_frame_bytes) +
                     "-byte AF_XDP frame with --tune multi-buffer=off, and connections would hang; "
                     "use multi-buffer, native mode (--native), or --path kernel"};
  }
  if (link.rx_aggregation) {
    return Error{{},
                 mode +
                     " with GRO/LRO on: aggregated packets carry their first segment's TCP "
                     "checksum, which the fast path verifies on this device, and exceed an "
                     "AF_XDP frame; turn them off (ethtool -K " +
                     link.ifname + " gro off lro off), use native mode, or --path kernel"};
  }
  return {};
}

bool PreferGenericXdp(const std::string& driver, bool chains) { return driver == "veth" && chains; }

Result<bool> RxAggregationOn(const std::string& ifname) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return SystemError("socket for ethtool");
  auto get = [&](uint32_t cmd, uint32_t* out) {
    ethtool_value v{};
    v.cmd = cmd;
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
    ifr.ifr_data = reinterpret_cast<char*>(&v);
    if (ioctl(fd, SIOCETHTOOL, &ifr) != 0) return false;
    *out = v.data;
    return true;
  };
  uint32_t gro = 0, flags = 0;
  const bool ok = get(ETHTOOL_GGRO, &gro) && get(ETHTOOL_GFLAGS, &flags);
  const int err = errno;
  close(fd);
  if (!ok) return SystemError(ifname + ": reading GRO/LRO (ethtool -k)", err);
  return gro != 0 || (flags & ETH_FLAG_LRO) != 0;
}

LinkFacts ReadLinkFacts(const std::string& ifname, uint32_t mtu, bool generic_xdp,
                        const std::string& why_generic) {
  LinkFacts f;
  f.ifname = ifname;
  if (auto driver = InterfaceDriver(ifname)) f.driver = *driver;
  f.mtu = mtu;
  f.generic_xdp = generic_xdp;
  f.why_generic = why_generic;
  if (generic_xdp) {
    auto aggregation = RxAggregationOn(ifname);
    f.rx_aggregation = !aggregation || *aggregation;
  }
  return f;
}

}  // namespace xdpfwd
