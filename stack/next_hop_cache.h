// Next-hop MACs for one interface, for the worker's output path. Two sources: frames received
// from on-link peers (their Ethernet source, learned for free on the way in) and the kernel's
// neighbour table (a netlink round trip, for next hops that have not sent us anything: a
// backend before its first SYN-ACK, a gateway). The cache is bounded: at kMaxEntries the least
// recently used entry makes room, so a flood of SYNs from spoofed sources costs a fixed amount
// of memory and, since each SYN teaches the cache its sender, no netlink call per source.
#pragma once

#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>

#include "stack/neighbor.h"

namespace xdpfwd {

class NextHopCache {
 public:
  // An entry from the kernel is asked again after this long (the kernel's own entry may have
  // changed). One learned from a frame is used as it is for kLearnedValidMs (Linux's
  // base_reachable_time), then checked with the kernel, and used meanwhile.
  static constexpr uint64_t kRevalidateMs = 1000;
  static constexpr uint64_t kLearnedValidMs = 30'000;
  // An unknown neighbour: the kernel is asked to resolve it, at most this often.
  static constexpr uint64_t kRetryMs = 100;
  static constexpr size_t kDefaultMaxEntries = 65536;

  explicit NextHopCache(int ifindex, size_t max_entries = kDefaultMaxEntries)
      : ifindex_(ifindex), max_entries_(max_entries) {}

  // `ip`, on-link, sent a frame from Ethernet address `mac`. The netif calls it for SYNs and
  // SYN-ACKs only: the first frame of every peer, at no cost per data frame.
  void Learn(in_addr ip, const MacAddress& mac, uint64_t now_ms);
  std::optional<MacAddress> Lookup(in_addr ip, uint64_t now_ms);

  size_t size() const { return entries_.size(); }
  uint64_t kernel_lookups() const { return kernel_lookups_; }
  uint64_t resolution_requests() const { return resolution_requests_; }
  uint64_t evicted() const { return evicted_; }

 private:
  struct Entry {
    MacAddress mac{};
    bool known = false;
    bool learned = false;     // from a frame, not from the kernel
    uint64_t checked_ms = 0;  // when the kernel was last asked, or the last frame seen
    std::list<uint32_t>::iterator lru;
  };
  // The entry for ip, created (evicting the least recently used at the bound) if absent, and
  // made the most recently used.
  Entry& Touch(uint32_t ip);

  int ifindex_;
  size_t max_entries_;
  std::unordered_map<uint32_t, Entry> entries_;
  std::list<uint32_t> lru_;  // most recently used first
  uint64_t kernel_lookups_ = 0, resolution_requests_ = 0, evicted_ = 0;
};

}  // namespace xdpfwd
