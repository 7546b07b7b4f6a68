// See neighbor_channel.h.
#include "stack/neighbor_channel.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "stack/rtnetlink_message.h"

namespace xdpfwd {
namespace {

// Questions outstanding at once. The kernel answers each inside its send, so more than a few
// means answers are being lost; forgetting them costs only a "no entry" we never hear.
constexpr size_t kMaxAsked = 1024;
// Room for a burst of announcements between two drains (one per second when idle): about
// 80 bytes of datagram each, plus the kernel's per-skb overhead.
constexpr int kReceiveBufferBytes = 1 << 20;

}  // namespace

Result<NeighborChannel> NeighborChannel::Open(int ifindex) {
  UniqueFd fd(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE));
  if (!fd) return SystemError("neighbour channel: rtnetlink socket");
  const int one = 1;
  // Best effort: a shorter error message (the header only) and a larger buffer.
  setsockopt(fd.get(), SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof(one));
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &kReceiveBufferBytes, sizeof(kReceiveBufferBytes));
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  local.nl_groups = RTMGRP_NEIGH;  // every neighbour change in this network namespace
  socklen_t local_len = sizeof(local);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
      getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &local_len) != 0) {
    return SystemError("neighbour channel: bind to the neighbour announcements");
  }
  return NeighborChannel(ifindex, std::move(fd), local.nl_pid);
}

bool NeighborChannel::Send(uint16_t type, uint16_t flags, const IpAddress& addr, uint16_t state,
                           uint8_t ndm_flags) {
  struct {
    nlmsghdr header;
    ndmsg neighbor;
    rtattr dst_attr;
    in6_addr dst;  // an IPv4 address takes its first 4 bytes; the message ends after them
  } request{};
  static_assert(offsetof(decltype(request), dst) ==
                NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(ndmsg)) + RTA_LENGTH(0));
  const uint32_t seq = sequence_++;
  const auto length = static_cast<uint32_t>(offsetof(decltype(request), dst) + addr.size());
  request.header = {length, type, static_cast<uint16_t>(NLM_F_REQUEST | flags), seq, 0};
  request.neighbor.ndm_family = static_cast<uint8_t>(addr.family);
  request.neighbor.ndm_ifindex = ifindex_;
  request.neighbor.ndm_state = state;
  request.neighbor.ndm_flags = ndm_flags;
  request.dst_attr = {static_cast<uint16_t>(RTA_LENGTH(addr.size())), NDA_DST};
  std::memcpy(&request.dst, addr.data(), addr.size());
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd_.get(), &request, length, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&kernel),
             sizeof(kernel)) < 0) {
    return false;
  }
  ++requests_;
  if (type == RTM_GETNEIGH) {
    if (asked_.size() >= kMaxAsked) asked_.clear();
    asked_[seq] = addr;
  }
  return true;
}

bool NeighborChannel::AskEntry(const IpAddress& addr) { return Send(RTM_GETNEIGH, 0, addr, 0, 0); }

bool NeighborChannel::AskResolution(const IpAddress& addr) {
  // NUD_NONE, as RequestNeighborResolution (neighbor.cpp) says why; no ACK wanted: a failure
  // comes back as an error message, which Parse ignores (the entry stays unknown, asked again).
  return Send(RTM_NEWNEIGH, NLM_F_CREATE, addr, NUD_NONE, NTF_USE);
}

void NeighborChannel::Parse(std::span<const uint8_t> datagram) {
  size_t offset = 0;
  while (const auto h = rtnl::ReadStruct<nlmsghdr>(datagram, offset)) {  // >= 16 bytes a pass
    if (h->nlmsg_len < NLMSG_HDRLEN || h->nlmsg_len > datagram.size() - offset) return;
    const auto payload = datagram.subspan(offset + NLMSG_HDRLEN, h->nlmsg_len - NLMSG_HDRLEN);
    offset += NLMSG_ALIGN(h->nlmsg_len);
    if (h->nlmsg_type == NLMSG_ERROR) {
      // Only our questions' errors name a sequence we know; ENOENT means "no entry".
      const auto err = rtnl::ReadStruct<nlmsgerr>(payload);
      const auto asked = asked_.find(h->nlmsg_seq);
      if (h->nlmsg_pid != port_id_ || asked == asked_.end()) continue;
      if (err && err->error != 0) updates_.push_back(NeighborUpdate{asked->second, 0, {}});
      asked_.erase(asked);
      continue;
    }
    if (h->nlmsg_type != RTM_NEWNEIGH && h->nlmsg_type != RTM_DELNEIGH) continue;
    if (h->nlmsg_pid == port_id_) asked_.erase(h->nlmsg_seq);
    const auto ndm = rtnl::ReadStruct<ndmsg>(payload);
    if (!ndm || ndm->ndm_ifindex != ifindex_) continue;
    const rtnl::Attributes attrs(payload, sizeof(ndmsg));
    IpAddress dst;
    if (ndm->ndm_family == AF_INET) {
      const auto a = attrs.GetAs<in_addr>(NDA_DST);
      if (!a) continue;
      dst = IpAddress::V4(*a);
    } else if (ndm->ndm_family == AF_INET6) {
      const auto a = attrs.GetAs<in6_addr>(NDA_DST);
      if (!a) continue;
      dst = IpAddress::V6(*a);
    } else {
      continue;
    }
    NeighborUpdate update{dst, h->nlmsg_type == RTM_DELNEIGH ? uint16_t{0} : ndm->ndm_state, {}};
    if (update.state & rtnl::kUsableStates) update.mac = attrs.GetAs<MacAddress>(NDA_LLADDR);
    updates_.push_back(update);
  }
}

std::span<const NeighborUpdate> NeighborChannel::Drain() {
  updates_.clear();
  for (;;) {
    sockaddr_nl from{};
    socklen_t from_len = sizeof(from);
    const ssize_t n = recvfrom(fd_.get(), buffer_.data(), buffer_.size(), MSG_DONTWAIT | MSG_TRUNC,
                               reinterpret_cast<sockaddr*>(&from), &from_len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ENOBUFS) {  // announcements were dropped; the socket goes on
      overrun_ = true;
      continue;
    }
    if (n < 0) break;  // EAGAIN: nothing more
    ++datagrams_;
    if (static_cast<size_t>(n) > buffer_.size()) {  // cannot happen for neighbour messages
      overrun_ = true;
      continue;
    }
    // Only the kernel's datagrams count: any process may send to our port id.
    if (from.nl_pid == 0) Parse(std::span<const uint8_t>(buffer_.data(), static_cast<size_t>(n)));
  }
  return updates_;
}

bool NeighborChannel::TakeOverrun() { return std::exchange(overrun_, false); }

}  // namespace xdpfwd
