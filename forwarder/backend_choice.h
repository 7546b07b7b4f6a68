// A rule's backends as one fast-path worker or kernel-path thread chooses among them for new
// connections: its picker (balance.h), its own handshakes' verdicts (backend_health.h), and
// the rule's entry on the shared HealthBoard (health_board.h): the checks' verdicts, the
// operator's states and weights, and the per-backend counters it adds to. Single-threaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "forwarder/backend_health.h"
#include "forwarder/balance.h"
#include "forwarder/health_board.h"

namespace xdpfwd {

class BackendChoice {
 public:
  // `board` may be nullptr (no board: every backend up and ready, the file's weights), and a
  // rule it does not cover has no entry there.
  BackendChoice(uint32_t rule_id, BalanceMethod method, std::vector<PickerBackend> backends,
                HealthBoard* board);

  // The backends that may take new connections (neither drain nor maint), a bit each; 0: none,
  // the caller refuses the client.
  uint64_t Ready() const {
    return entry_ != nullptr ? entry_->ready.load(std::memory_order_acquire) & all_ : all_;
  }
  // A backend for a new connection that has failed on `tried` so far: a ready one that no check
  // and no handshake of ours marked down; failing that, any ready one (the marks are a guess,
  // a handshake is not). nullopt when every ready backend is tried. A first pick (`tried` 0)
  // always finds one: should a drain land between the caller's Ready() and this pick, the
  // connection goes where the pick says rather than nowhere.
  std::optional<size_t> Pick(uint64_t now_ms, uint64_t tried, std::span<const uint8_t> client);
  // Least connections' count of backend i's connections: one per pick, given back at the end.
  void Opened(size_t i) { picker_.Opened(i); }
  void Closed(size_t i) { picker_.Closed(i); }

  // A handshake with backend i begins (a pick, or a failover to it): passive health follows it
  // (the backend's trial, after its down period) until one of the three below.
  HealthAttempt Began(size_t i, uint64_t now_ms) { return health_.Began(i, now_ms); }
  // Backend i's handshake `a` failed: true if that marked it down (passive health).
  bool Failed(size_t i, uint64_t now_ms, HealthAttempt& a);
  // Backend i's handshake `a` completed: a session begins on it.
  void Connected(size_t i, HealthAttempt& a);
  // The connection of handshake `a` ended before its verdict (harmless after either).
  void Abandoned(size_t i, HealthAttempt& a) { health_.Abandoned(i, a); }
  // A session that Connected ended, with the bytes it relayed each way.
  void Ended(size_t i, uint64_t to_backend, uint64_t from_backend);

  size_t size() const { return picker_.size(); }

 private:
  HealthBoard::BackendCounters* Counters(size_t i) {
    return entry_ != nullptr ? entry_->CountersFor(rule_id_, i) : nullptr;
  }
  // A weight moved on the board (`set weight`, a reload): the picker takes the new ones.
  void FollowWeights();

  uint32_t rule_id_;
  BackendPicker picker_;
  PassiveHealth health_;
  HealthBoard::Entry* entry_;
  uint64_t all_;
  uint32_t weights_seen_ = 0;  // the board's weights_generation last taken; 0: none yet
};

}  // namespace xdpfwd
