// The active health checks' verdicts (forwarder/health_checker.h), a bit per backend for each
// rule that asks for checks, where every reader finds them: one table in memory shared with the
// fast path's worker processes (made before they fork) and read by the kernel path's threads.
// The checker writes; a picker ANDs a rule's bits with its own passive verdicts.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace xdpfwd {

struct HealthBoard {
  static constexpr size_t kRules = 1024;  // rules with checks at once (reloads reuse entries)
  struct Entry {
    std::atomic<uint32_t> key;  // the rule's id + 1; 0: free
    uint32_t reserved;
    std::atomic<uint64_t> up;  // bit i: backend i passes its checks
  };
  Entry entries[kRules];

  // The rule's bits, or nullptr when nobody checks it (every backend counts as up).
  const std::atomic<uint64_t>* Find(uint32_t rule_id) const {
    for (const Entry& e : entries) {
      if (e.key.load(std::memory_order_acquire) == rule_id + 1) return &e.up;
    }
    return nullptr;
  }
  // The checker's: an entry for the rule, every backend up until a check says otherwise;
  // nullptr when the table is full (the rule is then served without active checks).
  std::atomic<uint64_t>* Claim(uint32_t rule_id) {
    for (Entry& e : entries) {
      if (e.key.load(std::memory_order_relaxed) == rule_id + 1) return &e.up;
    }
    for (Entry& e : entries) {
      if (e.key.load(std::memory_order_relaxed) != 0) continue;
      e.up.store(~uint64_t{0}, std::memory_order_relaxed);
      e.key.store(rule_id + 1, std::memory_order_release);  // after its bits
      return &e.up;
    }
    return nullptr;
  }
  void Release(uint32_t rule_id) {
    for (Entry& e : entries) {
      if (e.key.load(std::memory_order_relaxed) == rule_id + 1) {
        e.key.store(0, std::memory_order_release);
      }
    }
  }
};
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
              std::atomic<uint32_t>::is_always_lock_free);

}  // namespace xdpfwd
