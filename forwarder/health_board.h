// Each rule's backends as every reader finds them: one table in memory shared with the fast
// path's worker processes (made before they fork) and read by the kernel path's threads. The
// control process (forwarder/health_checker.h) writes the checks' verdicts, the admin states
// and the weights; the pickers (forwarder/backend_choice.h) read them and write the counters.
//
// The counters cost a path a few atomic adds per connection, never per relayed chunk: a
// session is counted when its backend handshake completes and when it ends, and its bytes are
// added when it ends (an open connection's bytes show once it has ended). A failed handshake
// adds one. Writers in several processes share a backend's counters, so they are atomics; the
// cache line they sit on moves between cores at the rate of connections, not of packets.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "forwarder/balance.h"

namespace xdpfwd {

struct HealthBoard {
  static constexpr size_t kRules = 1024;  // rules on the board at once (reloads reuse entries)

  struct BackendCounters {
    std::atomic<uint64_t> current;           // sessions open now (handshake done, not ended)
    std::atomic<uint64_t> sessions;          // handshakes completed
    std::atomic<uint64_t> connect_failures;  // handshakes that failed (refused, timed out, ...)
    std::atomic<uint64_t> bytes_to_backend;  // of sessions that ended
    std::atomic<uint64_t> bytes_from_backend;
  };

  struct Entry {
    std::atomic<uint32_t> key;  // the rule's id + 1; 0: free
    // Moves (release) after every change of `weights`: a picker that sees it move reads them
    // again and rebuilds its weights (never 0 once claimed).
    std::atomic<uint32_t> weights_generation;
    std::atomic<uint64_t> up;     // bit i: backend i passes its checks (all when unchecked)
    std::atomic<uint64_t> ready;  // bit i: backend i is ready (neither drain nor maint)
    std::atomic<uint32_t> weights[kMaxBackends];
    BackendCounters counters[kMaxBackends];

    // Counts for backend i of rule `rule_id`, unless the entry has gone to another rule since
    // the caller found it (a connection of a removed rule that ends late): its numbers went
    // with its rule.
    BackendCounters* CountersFor(uint32_t rule_id, size_t i) {
      return key.load(std::memory_order_relaxed) == rule_id + 1 ? &counters[i] : nullptr;
    }
  };
  Entry entries[kRules];

  // The rule's entry, or nullptr when the rule is not on the board (every backend counts as
  // up, ready and of the file's weight).
  Entry* Find(uint32_t rule_id) {
    for (Entry& e : entries) {
      if (e.key.load(std::memory_order_acquire) == rule_id + 1) return &e;
    }
    return nullptr;
  }
  // The control process's: an entry for the rule with every backend up and ready, zeroed
  // counters and weights 1 (the caller sets the file's next), or the one it already has;
  // nullptr when the table is full.
  Entry* Claim(uint32_t rule_id) {
    for (Entry& e : entries) {
      if (e.key.load(std::memory_order_relaxed) == rule_id + 1) return &e;
    }
    for (Entry& e : entries) {
      if (e.key.load(std::memory_order_relaxed) != 0) continue;
      e.up.store(~uint64_t{0}, std::memory_order_relaxed);
      e.ready.store(~uint64_t{0}, std::memory_order_relaxed);
      for (size_t i = 0; i < kMaxBackends; ++i) {
        e.weights[i].store(1, std::memory_order_relaxed);
        BackendCounters& c = e.counters[i];
        for (auto* n : {&c.current, &c.sessions, &c.connect_failures, &c.bytes_to_backend,
                        &c.bytes_from_backend}) {
          n->store(0, std::memory_order_relaxed);
        }
      }
      e.weights_generation.fetch_add(1, std::memory_order_relaxed);
      if (e.weights_generation.load(std::memory_order_relaxed) == 0) {
        e.weights_generation.store(1, std::memory_order_relaxed);
      }
      e.key.store(rule_id + 1, std::memory_order_release);  // after everything above
      return &e;
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
// Shared between processes: the atomics must be plain words, not locks in one process's memory.
static_assert(sizeof(std::atomic<uint64_t>) == 8 && sizeof(std::atomic<uint32_t>) == 4);

}  // namespace xdpfwd
