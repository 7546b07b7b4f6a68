// The worker's line to the kernel's neighbour table: one non-blocking rtnetlink socket that sends
// questions without waiting and also hears the kernel announce every change (RTNLGRP_NEIGH), so a
// next hop's MAC stays current with no periodic round trip and no call that can block a batch.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "os/ip_address.h"
#include "os/result.h"
#include "os/unique_fd.h"
#include "stack/neighbor.h"

namespace xdpfwd {

// What the kernel said about one neighbour of the channel's interface, of either family: an
// answer to AskEntry or an announcement of a change (made by anyone, ARP and ND included).
struct NeighborUpdate {
  IpAddress addr;
  uint16_t state = 0;             // NUD_*; 0 when there is no entry (deleted, or none to get)
  std::optional<MacAddress> mac;  // set when the state is usable and the address is Ethernet
};

class NeighborChannel {
 public:
  static Result<NeighborChannel> Open(int ifindex);

  // Each sends one request without waiting (MSG_DONTWAIT); the answer, if any, comes out of a
  // later Drain. The kernel handles rtnetlink requests inside the send, so a Drain right after
  // finds it. false: not sent (socket buffer full, or an error): ask again later.
  bool AskEntry(const IpAddress& addr);  // RTM_GETNEIGH
  // RTM_NEWNEIGH with NTF_USE: the kernel starts ARP (IPv4) or neighbour solicitation (IPv6) for
  // addr, or re-confirms a STALE entry. The caller must know the entry is not PERMANENT/NOARP
  // (NTF_USE would make it dynamic).
  bool AskResolution(const IpAddress& addr);

  // Everything queued since the last call, without blocking (no syscall beyond the reads that
  // find data, plus one that finds none). Valid until the next Drain.
  std::span<const NeighborUpdate> Drain();
  // The kernel dropped announcements because the socket's buffer was full (ENOBUFS) since the
  // last call: what the caller holds may be out of date. Cleared by reading.
  bool TakeOverrun();

  uint64_t requests() const { return requests_; }
  uint64_t datagrams() const { return datagrams_; }

 private:
  NeighborChannel(int ifindex, UniqueFd fd, uint32_t port_id)
      : ifindex_(ifindex), fd_(std::move(fd)), port_id_(port_id), buffer_(kDatagramBytes) {}
  static constexpr size_t kDatagramBytes = 16 * 1024;  // one datagram: a few hundred bytes used
  bool Send(uint16_t type, uint16_t flags, const IpAddress& addr, uint16_t state,
            uint8_t ndm_flags);
  void Parse(std::span<const uint8_t> datagram);

  int ifindex_;
  UniqueFd fd_;
  uint32_t port_id_;
  uint32_t sequence_ = 1;
  // Entry questions not yet answered, by sequence number: an answer of "no such entry" is an
  // error message that names only the sequence. Bounded: the kernel answers inside the send.
  std::unordered_map<uint32_t, IpAddress> asked_;
  std::vector<NeighborUpdate> updates_;
  std::vector<uint8_t> buffer_;
  bool overrun_ = false;
  uint64_t requests_ = 0, datagrams_ = 0;
};

}  // namespace xdpfwd
