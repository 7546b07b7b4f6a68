// Next-hop MACs for one interface, for the worker's output path, IPv4 and IPv6 neighbours
// alike (keyed by IpAddress; an IPv6 next hop is often a router's link-local address, which
// the kernel's table holds per interface as it holds every other). Two sources: frames received
// from on-link peers (their Ethernet source, learned for free on the way in) and the kernel's
// neighbour table (for next hops that have not sent us anything: a backend before its first
// SYN-ACK, a gateway), read through a non-blocking NeighborChannel: a question costs one send
// and one read, and the kernel's announcements of changes keep its entries current with no
// periodic question. The cache is bounded: at kMaxEntries the least recently used entry makes
// room, so a flood of SYNs from spoofed sources costs a fixed amount of memory and, since each
// SYN teaches the cache its sender, no question per source.
#pragma once

#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>

#include "os/ip_address.h"
#include "stack/neighbor.h"
#include "stack/neighbor_channel.h"

namespace xdpfwd {

class NextHopCache {
 public:
  // An entry from the kernel follows the kernel's announcements, read at most every
  // kAnnouncementsMs while lookups happen (one read that usually finds nothing). One learned
  // from a frame is used as it is for kLearnedValidMs (Linux's base_reachable_time), then
  // checked with the kernel, and used meanwhile.
  static constexpr uint64_t kAnnouncementsMs = 1000;
  static constexpr uint64_t kLearnedValidMs = 30'000;
  // An unknown neighbour: the kernel is asked to resolve it, at most this often.
  static constexpr uint64_t kRetryMs = 100;
  static constexpr size_t kDefaultMaxEntries = 65536;

  explicit NextHopCache(int ifindex, size_t max_entries = kDefaultMaxEntries);

  // `ip`, on-link, sent a frame from Ethernet address `mac`. The netif calls it for SYNs and
  // SYN-ACKs only: the first frame of every peer, at no cost per data frame.
  void Learn(const IpAddress& ip, const MacAddress& mac, uint64_t now_ms);
  std::optional<MacAddress> Lookup(const IpAddress& ip, uint64_t now_ms);
  void Learn(in_addr ip, const MacAddress& mac, uint64_t now_ms) {
    Learn(IpAddress::V4(ip), mac, now_ms);
  }
  std::optional<MacAddress> Lookup(in_addr ip, uint64_t now_ms) {
    return Lookup(IpAddress::V4(ip), now_ms);
  }

  size_t size() const { return entries_.size(); }
  uint64_t kernel_lookups() const { return kernel_lookups_; }
  uint64_t resolution_requests() const { return resolution_requests_; }
  uint64_t kernel_updates() const { return kernel_updates_; }  // applied to entries held
  uint64_t evicted() const { return evicted_; }
  // Why the kernel cannot be asked (the channel did not open); empty when it can.
  const std::string& channel_error() const { return channel_error_; }

 private:
  struct Entry {
    MacAddress mac{};
    bool known = false;
    bool learned = false;       // from a frame (or no longer in the kernel's table)
    uint64_t checked_ms = 0;    // learned: the last frame seen or question asked
    uint64_t asked_ms = 0;      // unknown: when the kernel was last asked
    uint64_t resolving_ms = 0;  // when the kernel was last asked to resolve it
    std::list<IpAddress>::iterator lru;
  };
  // Asks the kernel for ip's entry and reads the answer (given inside the send).
  void Ask(const IpAddress& ip, uint64_t now_ms);
  // Reads what the kernel said and applies it to the entries held.
  void Listen(uint64_t now_ms);
  void Apply(const NeighborUpdate& update, uint64_t now_ms);
  // The entry for ip, created (evicting the least recently used at the bound) if absent, and
  // made the most recently used.
  Entry& Touch(const IpAddress& ip);

  size_t max_entries_;
  std::optional<NeighborChannel> channel_;
  std::string channel_error_;
  uint64_t listened_ms_ = 0;
  std::unordered_map<IpAddress, Entry, IpAddressHash> entries_;
  std::list<IpAddress> lru_;  // most recently used first
  uint64_t kernel_lookups_ = 0, resolution_requests_ = 0, kernel_updates_ = 0, evicted_ = 0;
};

}  // namespace xdpfwd
