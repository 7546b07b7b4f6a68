// See next_hop_cache.h.
#include "stack/next_hop_cache.h"

namespace xdpfwd {

NextHopCache::Entry& NextHopCache::Touch(uint32_t ip) {
  if (auto it = entries_.find(ip); it != entries_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return it->second;
  }
  if (entries_.size() >= max_entries_ && !lru_.empty()) {
    entries_.erase(lru_.back());
    lru_.pop_back();
    ++evicted_;
  }
  lru_.push_front(ip);
  Entry& e = entries_[ip];
  e.lru = lru_.begin();
  return e;
}

void NextHopCache::Learn(in_addr ip, const MacAddress& mac, uint64_t now_ms) {
  Entry& e = Touch(ip.s_addr);
  e.mac = mac;
  e.known = true;
  e.learned = true;
  e.checked_ms = now_ms;
}

std::optional<MacAddress> NextHopCache::Lookup(in_addr ip, uint64_t now_ms) {
  Entry& e = Touch(ip.s_addr);
  if (e.known && e.learned) {
    // Like a STALE entry in Linux: still used, and checked. The kernel's answer replaces it;
    // without one the kernel is asked to resolve it and the learned address stays in use.
    if (now_ms - e.checked_ms >= kLearnedValidMs) {
      e.checked_ms = now_ms;
      ++kernel_lookups_;
      auto found = LookupNeighbor(ifindex_, ip);
      if (found && found->has_value()) {
        e.mac = **found;
        e.learned = false;
      } else {
        ++resolution_requests_;
        (void)RequestNeighborResolution(ifindex_, ip);
      }
    }
    return e.mac;
  }
  if (e.known && now_ms - e.checked_ms < kRevalidateMs) return e.mac;
  if (!e.known && e.checked_ms != 0 && now_ms - e.checked_ms < kRetryMs) return std::nullopt;
  e.checked_ms = now_ms;
  ++kernel_lookups_;
  auto found = LookupNeighbor(ifindex_, ip);
  if (found && found->has_value()) {
    e.mac = **found;
    e.known = true;
    return e.mac;
  }
  // Unknown, or known but gone from the kernel: ask the kernel to resolve it; lwIP keeps the
  // segment and retries.
  e.known = false;
  ++resolution_requests_;
  (void)RequestNeighborResolution(ifindex_, ip);
  return std::nullopt;
}

}  // namespace xdpfwd
