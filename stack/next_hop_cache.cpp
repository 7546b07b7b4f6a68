// See next_hop_cache.h.
#include "stack/next_hop_cache.h"

#include "stack/rtnetlink_message.h"

namespace xdpfwd {

NextHopCache::NextHopCache(int ifindex, size_t max_entries) : max_entries_(max_entries) {
  if (auto channel = NeighborChannel::Open(ifindex)) {
    channel_.emplace(std::move(*channel));
  } else {
    channel_error_ = channel.error().message();
  }
}

NextHopCache::Entry& NextHopCache::Touch(const IpAddress& ip) {
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

void NextHopCache::Learn(const IpAddress& ip, const MacAddress& mac, uint64_t now_ms) {
  Entry& e = Touch(ip);
  e.mac = mac;
  e.known = true;
  e.learned = true;
  e.checked_ms = now_ms;
}

std::optional<MacAddress> NextHopCache::Lookup(const IpAddress& ip, uint64_t now_ms) {
  if (now_ms - listened_ms_ >= kAnnouncementsMs) Listen(now_ms);
  Entry& e = Touch(ip);  // references into the map stay valid: Apply never erases
  if (e.known) {
    // A learned entry past its validity is like a STALE one in Linux: used, and checked.
    if (e.learned && now_ms - e.checked_ms >= kLearnedValidMs) {
      e.checked_ms = now_ms;
      Ask(ip, now_ms);
    }
    return e.mac;
  }
  if (e.asked_ms != 0 && now_ms - e.asked_ms < kRetryMs) return std::nullopt;
  e.asked_ms = now_ms;
  Ask(ip, now_ms);  // the answer is in before Ask returns
  if (e.known) return e.mac;
  return std::nullopt;  // the kernel is resolving it; lwIP keeps the segment and retries
}

void NextHopCache::Ask(const IpAddress& ip, uint64_t now_ms) {
  if (!channel_) return;
  ++kernel_lookups_;
  channel_->AskEntry(ip);
  Listen(now_ms);
}

void NextHopCache::Listen(uint64_t now_ms) {
  listened_ms_ = now_ms;
  if (!channel_) return;
  for (const NeighborUpdate& update : channel_->Drain()) Apply(update, now_ms);
  if (channel_->TakeOverrun()) {
    // Announcements were lost: every entry taken from the kernel is checked again on its next
    // lookup, and used meanwhile.
    for (auto& [ip, e] : entries_) {
      if (e.known && !e.learned) {
        e.learned = true;
        e.checked_ms = now_ms - kLearnedValidMs;
      }
    }
  }
}

void NextHopCache::Apply(const NeighborUpdate& update, uint64_t now_ms) {
  const auto it = entries_.find(update.addr);
  if (it == entries_.end()) return;  // not a next hop of ours
  Entry& e = it->second;
  ++kernel_updates_;
  if (update.mac) {
    e.mac = *update.mac;
    e.known = true;
    e.learned = false;
    return;
  }
  // Usable but not Ethernet (cannot be used), or INCOMPLETE (the kernel is resolving it): wait.
  if (update.state & (rtnl::kUsableStates | NUD_INCOMPLETE)) return;
  // No entry, FAILED or deleted. A MAC we hold stays in use, as a learned one (the peer may well
  // be there: its traffic comes to us, not to the kernel), and the kernel is asked to resolve it,
  // at most every kRetryMs. Never for a PERMANENT or NOARP entry: those are usable, above.
  if (e.known && !e.learned) {
    e.learned = true;
    e.checked_ms = now_ms;
  }
  if (e.resolving_ms != 0 && now_ms - e.resolving_ms < kRetryMs) return;
  e.resolving_ms = now_ms;
  ++resolution_requests_;
  channel_->AskResolution(update.addr);
}

}  // namespace xdpfwd
