// Routes, neighbours and links over raw rtnetlink (no libnl, no `ip`). One socket per call: these
// run at set-up or on a neighbour miss, never per packet.
#include "stack/neighbor.h"

#include <arpa/inet.h>
#include <linux/ethtool.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <span>
#include <thread>
#include <vector>

#include "os/endpoint.h"
#include "os/ip_address.h"
#include "os/unique_fd.h"
#include "stack/rtnetlink_message.h"

namespace xdpfwd {
namespace {

using rtnl::Attributes;
using rtnl::Bytes;
using rtnl::kUsableStates;
using rtnl::ReadStruct;
using rtnl::Request;

constexpr time_t kReplyTimeoutSeconds = 5;
// A dump of millions of entries fits in this many datagrams; more means something is wrong.
constexpr int kMaxDatagrams = 1 << 16;

std::atomic<uint32_t> g_sequence{1};

struct Message {
  uint16_t type;
  uint16_t flags;
  Bytes payload;  // after the nlmsghdr
};

// An NLMSG_ERROR reply: 0 is an ACK; otherwise the errno and, with NETLINK_EXT_ACK, the kernel's
// reason, which follows the echoed request (only its header when NLM_F_CAPPED).
Result<void> CheckAck(const Message& m, const std::string& what) {
  const auto err = ReadStruct<nlmsgerr>(m.payload);
  if (!err) return SystemError(what + ": truncated rtnetlink error", EBADMSG);
  if (err->error == 0) return {};
  std::string context = what;
  const size_t echoed =
      (m.flags & NLM_F_CAPPED) ? sizeof(nlmsgerr) : sizeof(int) + err->msg.nlmsg_len;
  const auto text = Attributes(m.payload, echoed).GetString(NLMSGERR_ATTR_MSG);
  if ((m.flags & NLM_F_ACK_TLVS) && text && !text->empty()) context += " (kernel: " + *text + ")";
  return SystemError(context, -err->error);
}

// Sends request on a fresh socket and passes each reply to on_reply until the kernel is done:
// after the one answer to a plain get, at NLMSG_DONE for a dump, at the ACK when one was asked for.
// Errors read "<what>: <strerror>".
template <typename OnReply>
Result<void> Exchange(Request& request, const std::string& what, OnReply&& on_reply) {
  UniqueFd fd(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!fd) return SystemError(what + ": rtnetlink socket");
  const int one = 1;
  // Best effort (older kernels lack them): the kernel's error text, and no echo of our request.
  // The kernel answers synchronously; the receive timeout only bounds a kernel bug.
  setsockopt(fd.get(), SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof(one));
  setsockopt(fd.get(), SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof(one));
  const timeval timeout{kReplyTimeoutSeconds, 0};
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  socklen_t local_len = sizeof(local);
  if (setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout)) != 0 ||
      bind(fd.get(), reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
      getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &local_len) != 0) {
    return SystemError(what + ": rtnetlink socket set-up");
  }

  const uint32_t seq = g_sequence.fetch_add(1, std::memory_order_relaxed);
  const nlmsghdr header{static_cast<uint32_t>(request.bytes.size()), request.type, request.flags,
                        seq, 0};
  std::memcpy(request.bytes.data(), &header, sizeof(header));
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd.get(), request.bytes.data(), request.bytes.size(), 0,
             reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0) {
    return SystemError(what + ": rtnetlink send");
  }

  const bool dump = (request.flags & NLM_F_DUMP) == NLM_F_DUMP;
  const bool wants_ack = request.flags & NLM_F_ACK;
  bool interrupted = false;
  std::vector<uint8_t> buf(32 * 1024);
  for (int datagram = 0; datagram < kMaxDatagrams; ++datagram) {
    // Peek for the size first so no reply is ever truncated, whatever the kernel sends.
    ssize_t n = recv(fd.get(), buf.data(), buf.size(), MSG_PEEK | MSG_TRUNC);
    if (n > 0 && static_cast<size_t>(n) > buf.size()) buf.resize(static_cast<size_t>(n));
    sockaddr_nl from{};
    socklen_t from_len = sizeof(from);
    if (n >= 0) {
      n = recvfrom(fd.get(), buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from),
                   &from_len);
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return SystemError(what + ": rtnetlink receive");  // EAGAIN: SO_RCVTIMEO passed
    // Only the kernel's datagrams count: any process may unicast to our port id.
    const Bytes data(buf.data(), from.nl_pid == 0 ? static_cast<size_t>(n) : 0);
    size_t offset = 0;
    while (const auto h = ReadStruct<nlmsghdr>(data, offset)) {  // advances >= 16 bytes a pass
      if (h->nlmsg_len < NLMSG_HDRLEN || h->nlmsg_len > data.size() - offset) {
        return SystemError(what + ": malformed rtnetlink reply", EBADMSG);
      }
      const Message m{h->nlmsg_type, h->nlmsg_flags,
                      data.subspan(offset + NLMSG_HDRLEN, h->nlmsg_len - NLMSG_HDRLEN)};
      offset += NLMSG_ALIGN(h->nlmsg_len);
      if (h->nlmsg_seq != seq || h->nlmsg_pid != local.nl_pid || m.type == NLMSG_NOOP) continue;
      if (m.type == NLMSG_ERROR) return CheckAck(m, what);
      if (m.type == NLMSG_OVERRUN) return SystemError(what + ": rtnetlink overrun", ENOBUFS);
      if (m.type == NLMSG_DONE) {
        // A failing dump puts its errno here. NLM_F_DUMP_INTR: the table changed mid-dump, so
        // what we saw may be inconsistent.
        const auto err = ReadStruct<int>(m.payload);
        if (err && *err < 0) return SystemError(what, -*err);
        if (interrupted) return SystemError(what + ": the table changed while read", EINTR);
        return {};
      }
      interrupted |= (m.flags & NLM_F_DUMP_INTR) != 0;
      on_reply(m);
      if (!dump && !wants_ack && !(m.flags & NLM_F_MULTI)) return {};
    }
  }
  return SystemError(what + ": rtnetlink reply never ended", EPROTO);
}

struct Link {
  std::string name;
  uint16_t type = 0;  // ARPHRD_*
  std::optional<MacAddress> mac;
  int mtu = 0;
};

Result<Link> GetLink(int ifindex) {
  ifinfomsg ifi{};
  ifi.ifi_index = ifindex;
  Request request(RTM_GETLINK, 0, ifi);
  const uint32_t mask = RTEXT_FILTER_SKIP_STATS;  // statistics are most of a reply; we need none
  request.AddAttribute(IFLA_EXT_MASK, &mask, sizeof(mask));
  const std::string what = "interface index " + std::to_string(ifindex);
  Link link;
  auto exchanged = Exchange(request, what, [&](const Message& m) {
    const auto header = ReadStruct<ifinfomsg>(m.payload);
    if (m.type != RTM_NEWLINK || !header) return;
    const auto attrs = Attributes(m.payload, sizeof(ifinfomsg));
    link = Link{attrs.GetString(IFLA_IFNAME).value_or(""), header->ifi_type,
                attrs.GetAs<MacAddress>(IFLA_ADDRESS),
                static_cast<int>(attrs.GetAs<uint32_t>(IFLA_MTU).value_or(0))};
  });
  if (!exchanged) return exchanged.error();
  if (link.name.empty()) return SystemError(what + ": no link in the kernel's reply", EBADMSG);
  return link;
}

std::string LinkName(int ifindex) {
  auto link = GetLink(ifindex);
  return link ? link->name : "interface index " + std::to_string(ifindex);
}

struct NeighborEntry {
  uint16_t state = NUD_NONE;
  std::optional<MacAddress> mac;  // only for a 6-byte link-layer address
};

Request NeighborRequest(uint16_t type, uint16_t flags, int ifindex, const IpAddress& addr,
                        uint16_t state, uint8_t ndm_flags) {
  Request request(type, flags,
                  ndmsg{static_cast<uint8_t>(addr.family), 0, 0, ifindex, state, ndm_flags, 0});
  request.AddAttribute(NDA_DST, addr.data(), addr.size());
  return request;
}

Result<std::optional<NeighborEntry>> GetNeighbor(int ifindex, const IpAddress& addr) {
  Request request = NeighborRequest(RTM_GETNEIGH, 0, ifindex, addr, 0, 0);
  std::optional<NeighborEntry> entry;
  auto exchanged = Exchange(
      request, "neighbour " + ToString(addr) + " on interface index " + std::to_string(ifindex),
      [&](const Message& m) {
        const auto header = ReadStruct<ndmsg>(m.payload);
        if (m.type != RTM_NEWNEIGH || !header) return;
        entry = NeighborEntry{header->ndm_state,
                              Attributes(m.payload, sizeof(ndmsg)).GetAs<MacAddress>(NDA_LLADDR)};
      });
  // ENOENT: there is no entry, which is an answer, not an error.
  if (!exchanged && exchanged.error().code != std::errc::no_such_file_or_directory) {
    return exchanged.error();
  }
  return entry;
}

// The MAC of a usable entry; nullopt if there is no usable entry.
Result<std::optional<MacAddress>> UsableMac(const std::optional<NeighborEntry>& entry, int ifindex,
                                            const IpAddress& addr) {
  if (!entry || !(entry->state & kUsableStates)) return std::optional<MacAddress>();
  if (!entry->mac) {
    return SystemError(
        "neighbour " + ToString(addr) + " on " + LinkName(ifindex) + " has no Ethernet address",
        EAFNOSUPPORT);
  }
  return entry->mac;
}

// NTF_USE makes the kernel act as if a packet wanted the entry: it creates it if needed and starts
// ARP or neighbour discovery (or re-confirms a STALE entry), with no packet queued behind it.
Result<void> SendNeighborUse(int ifindex, const IpAddress& addr) {
  // NUD_NONE, not the NUD_PERMANENT `ip neigh ... use` sends: neigh_add() makes a new entry exempt
  // from garbage collection when the requested state is PERMANENT, though it ends up dynamic.
  Request request =
      NeighborRequest(RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_ACK, ifindex, addr, NUD_NONE, NTF_USE);
  return Exchange(request,
                  "ask the kernel to resolve " + ToString(addr) + " on interface index " +
                      std::to_string(ifindex),
                  [](const Message&) {});
}

}  // namespace

std::string FormatMac(const MacAddress& mac) {
  char buf[18];
  std::snprintf(buf, sizeof(buf), "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3],
                mac[4], mac[5]);
  return buf;
}

Result<Route> LookupRoute(in_addr dst) {
  rtmsg rtm{};
  rtm.rtm_family = AF_INET;
  rtm.rtm_dst_len = 32;
  Request request(RTM_GETROUTE, 0, rtm);
  request.AddAttribute(RTA_DST, &dst.s_addr, sizeof(dst.s_addr));
  const std::string what = "no route to " + ToString(dst);
  Route route;
  std::optional<uint8_t> type;
  bool via_ipv6 = false;
  auto exchanged = Exchange(request, what, [&](const Message& m) {
    const auto header = ReadStruct<rtmsg>(m.payload);
    if (m.type != RTM_NEWROUTE || !header) return;
    const auto attrs = Attributes(m.payload, sizeof(rtmsg));
    type = header->rtm_type;
    route.oif = static_cast<int>(attrs.GetAs<uint32_t>(RTA_OIF).value_or(0));
    route.gateway = attrs.GetAs<in_addr>(RTA_GATEWAY).value_or(in_addr{});
    route.prefsrc = attrs.GetAs<in_addr>(RTA_PREFSRC).value_or(in_addr{});
    via_ipv6 = attrs.Get(RTA_VIA).has_value();  // an IPv4 route through an IPv6 next hop
  });
  if (!exchanged) return exchanged.error();
  if (!type) return SystemError(what + ": no route in the kernel's reply", EBADMSG);
  if (*type != RTN_UNICAST || route.oif == 0) {
    // Local, broadcast and multicast destinations come back as routes, but not through a next hop.
    const std::string kind = *type == RTN_LOCAL       ? "local"
                             : *type == RTN_BROADCAST ? "broadcast"
                                                      : std::to_string(*type);
    return SystemError(ToString(dst) + " has a route of type " + kind + ", not one to a host",
                       EHOSTUNREACH);
  }
  if (via_ipv6) {
    return SystemError("route to " + ToString(dst) + " goes via an IPv6 next hop", EAFNOSUPPORT);
  }
  auto link = GetLink(route.oif);
  if (!link) return link.error();
  route.ifname = link->name;
  route.next_hop = route.gateway.s_addr != 0 ? route.gateway : dst;
  return route;
}

Result<Route6> LookupRoute(const in6_addr& dst) {
  rtmsg rtm{};
  rtm.rtm_family = AF_INET6;
  rtm.rtm_dst_len = 128;
  Request request(RTM_GETROUTE, 0, rtm);
  request.AddAttribute(RTA_DST, &dst, sizeof(dst));
  const std::string text = ToString(IpAddress::V6(dst));
  const std::string what = "no route to " + text;
  Route6 route;
  std::optional<uint8_t> type;
  auto exchanged = Exchange(request, what, [&](const Message& m) {
    const auto header = ReadStruct<rtmsg>(m.payload);
    if (m.type != RTM_NEWROUTE || !header) return;
    const auto attrs = Attributes(m.payload, sizeof(rtmsg));
    type = header->rtm_type;
    route.oif = static_cast<int>(attrs.GetAs<uint32_t>(RTA_OIF).value_or(0));
    route.gateway = attrs.GetAs<in6_addr>(RTA_GATEWAY).value_or(in6_addr{});
    route.prefsrc = attrs.GetAs<in6_addr>(RTA_PREFSRC).value_or(in6_addr{});
  });
  if (!exchanged) return exchanged.error();
  if (!type) return SystemError(what + ": no route in the kernel's reply", EBADMSG);
  if (*type != RTN_UNICAST || route.oif == 0) {
    const std::string kind = *type == RTN_LOCAL ? "local" : std::to_string(*type);
    return SystemError(text + " has a route of type " + kind + ", not one to a host", EHOSTUNREACH);
  }
  auto link = GetLink(route.oif);
  if (!link) return link.error();
  route.ifname = link->name;
  route.next_hop = IN6_IS_ADDR_UNSPECIFIED(&route.gateway) ? dst : route.gateway;
  return route;
}

Result<InterfaceAddress6> InterfaceIpv6Address(int ifindex) {
  std::optional<InterfaceAddress6> found;
  Request request(RTM_GETADDR, NLM_F_DUMP, ifaddrmsg{AF_INET6, 0, 0, 0, 0});
  auto dumped = Exchange(request, "list IPv6 addresses", [&](const Message& m) {
    const auto header = ReadStruct<ifaddrmsg>(m.payload);
    if (found || m.type != RTM_NEWADDR || !header || header->ifa_family != AF_INET6 ||
        static_cast<int>(header->ifa_index) != ifindex || header->ifa_scope != RT_SCOPE_UNIVERSE) {
      return;
    }
    const auto attrs = Attributes(m.payload, sizeof(ifaddrmsg));
    // The flags in the header are 8 bits; IFA_FLAGS has them all when present.
    const uint32_t flags = attrs.GetAs<uint32_t>(IFA_FLAGS).value_or(header->ifa_flags);
    if (flags & (IFA_F_TENTATIVE | IFA_F_DADFAILED)) return;
    const auto addr = attrs.GetAs<in6_addr>(IFA_ADDRESS);
    if (addr) found = InterfaceAddress6{*addr, header->ifa_prefixlen};
  });
  if (!dumped) return dumped.error();
  if (!found) {
    return SystemError(LinkName(ifindex) + " has no usable global IPv6 address", EADDRNOTAVAIL);
  }
  return *found;
}

Result<std::optional<MacAddress>> LookupNeighbor(int ifindex, const IpAddress& addr) {
  auto entry = GetNeighbor(ifindex, addr);
  if (!entry) return entry.error();
  return UsableMac(*entry, ifindex, addr);
}

Result<void> RequestNeighborResolution(int ifindex, const IpAddress& addr) {
  auto entry = GetNeighbor(ifindex, addr);
  if (!entry) return entry.error();
  // NTF_USE on an existing entry clears NUD_PERMANENT (__neigh_update), so a static entry would
  // lose its MAC and go to ARP. Static entries need no resolving. (One made static between this
  // check and the request still loses that race; set-up code does not race itself.)
  if (*entry && ((*entry)->state & (NUD_PERMANENT | NUD_NOARP))) return {};
  return SendNeighborUse(ifindex, addr);
}

Result<MacAddress> ResolveNeighbor(int ifindex, const IpAddress& addr,
                                   std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  uint16_t state = NUD_NONE;
  // Each pass sleeps at least 1 ms until the deadline, so the deadline bounds the loop.
  for (;;) {
    auto entry = GetNeighbor(ifindex, addr);
    if (!entry) return entry.error();
    auto mac = UsableMac(*entry, ifindex, addr);
    if (!mac || *mac) return mac ? Result<MacAddress>(**mac) : Result<MacAddress>(mac.error());
    // Absent, or FAILED once the kernel ran out of probes: (re)start. INCOMPLETE is under way.
    state = *entry ? (*entry)->state : NUD_NONE;
    if (state == NUD_NONE || (state & NUD_FAILED)) {
      if (auto sent = SendNeighborUse(ifindex, addr); !sent) return sent.error();
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  const char* name = (state & NUD_INCOMPLETE) ? "INCOMPLETE" : (state ? "FAILED" : "absent");
  return SystemError(ToString(addr) + " on " + LinkName(ifindex) + ": no " +
                         (addr.is_v6() ? "neighbour advertisement" : "ARP reply") + " within " +
                         std::to_string(timeout.count()) + " ms (entry " + name + ")",
                     EHOSTUNREACH);
}

Result<std::pair<int, std::string>> InterfaceWithAddress(in_addr addr) {
  std::vector<int> holders;
  Request request(RTM_GETADDR, NLM_F_DUMP, ifaddrmsg{AF_INET, 0, 0, 0, 0});
  auto dumped = Exchange(request, "list addresses", [&](const Message& m) {
    const auto header = ReadStruct<ifaddrmsg>(m.payload);
    if (m.type != RTM_NEWADDR || !header || header->ifa_family != AF_INET) return;
    const auto attrs = Attributes(m.payload, sizeof(ifaddrmsg));
    // IFA_LOCAL is the interface's own address; IFA_ADDRESS is the peer's on point-to-point.
    auto local = attrs.GetAs<in_addr>(IFA_LOCAL);
    if (!local) local = attrs.GetAs<in_addr>(IFA_ADDRESS);
    const int index = static_cast<int>(header->ifa_index);
    if (local && local->s_addr == addr.s_addr &&
        std::find(holders.begin(), holders.end(), index) == holders.end()) {
      holders.push_back(index);
    }
  });
  if (!dumped) return dumped.error();
  if (holders.empty())
    return SystemError("no interface has address " + ToString(addr), EADDRNOTAVAIL);
  if (holders.size() > 1) {
    return SystemError(ToString(addr) + " is on both " + LinkName(holders[0]) + " and " +
                           LinkName(holders[1]) + "; name the interface",
                       EADDRNOTAVAIL);
  }
  auto link = GetLink(holders[0]);
  if (!link) return link.error();
  return std::pair<int, std::string>(holders[0], link->name);
}

Result<InterfaceHolding6> InterfaceWithAddress(const in6_addr& addr) {
  std::vector<InterfaceHolding6> holders;
  bool tentative = false;
  Request request(RTM_GETADDR, NLM_F_DUMP, ifaddrmsg{AF_INET6, 0, 0, 0, 0});
  auto dumped = Exchange(request, "list IPv6 addresses", [&](const Message& m) {
    const auto header = ReadStruct<ifaddrmsg>(m.payload);
    if (m.type != RTM_NEWADDR || !header || header->ifa_family != AF_INET6) return;
    const auto attrs = Attributes(m.payload, sizeof(ifaddrmsg));
    const auto local = attrs.GetAs<in6_addr>(IFA_ADDRESS);
    if (!local || std::memcmp(&*local, &addr, sizeof(addr)) != 0) return;
    const uint32_t flags = attrs.GetAs<uint32_t>(IFA_FLAGS).value_or(header->ifa_flags);
    if (flags & (IFA_F_TENTATIVE | IFA_F_DADFAILED)) {
      tentative = true;
      return;
    }
    const int index = static_cast<int>(header->ifa_index);
    if (std::none_of(holders.begin(), holders.end(),
                     [&](const InterfaceHolding6& h) { return h.ifindex == index; })) {
      holders.push_back(InterfaceHolding6{index, {}, header->ifa_prefixlen});
    }
  });
  if (!dumped) return dumped.error();
  const IpAddress a = IpAddress::V6(addr);
  if (holders.empty()) {
    return SystemError(tentative ? ToString(a) + " is still tentative (duplicate address detection)"
                                 : "no interface has address " + ToString(a),
                       EADDRNOTAVAIL);
  }
  if (holders.size() > 1) {
    return SystemError(ToString(a) + " is on both " + LinkName(holders[0].ifindex) + " and " +
                           LinkName(holders[1].ifindex) + "; name the interface",
                       EADDRNOTAVAIL);
  }
  auto link = GetLink(holders[0].ifindex);
  if (!link) return link.error();
  holders[0].name = link->name;
  return holders[0];
}

Result<MacAddress> InterfaceMac(int ifindex) {
  auto link = GetLink(ifindex);
  if (!link) return link.error();
  if (link->type != ARPHRD_ETHER || !link->mac) {
    return SystemError(
        link->name + " is not an Ethernet interface (link type " + std::to_string(link->type) + ")",
        EOPNOTSUPP);
  }
  return *link->mac;
}

Result<int> InterfaceMtu(int ifindex) {
  auto link = GetLink(ifindex);
  if (!link) return link.error();
  return link->mtu;
}

Result<std::string> InterfaceDriver(const std::string& ifname) {
  UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd) return SystemError("socket for ethtool");
  ethtool_drvinfo info{};
  info.cmd = ETHTOOL_GDRVINFO;
  ifreq req{};
  if (ifname.size() >= sizeof(req.ifr_name)) return Error{{}, "interface name too long: " + ifname};
  std::memcpy(req.ifr_name, ifname.c_str(), ifname.size());
  req.ifr_data = reinterpret_cast<char*>(&info);
  if (ioctl(fd.get(), SIOCETHTOOL, &req) != 0) return SystemError(ifname + ": ethtool driver info");
  return std::string(info.driver);
}

}  // namespace xdpfwd
