// What a path's own backend handshakes say about each backend of a rule (passive health): a
// backend whose handshakes fail `fall` times in a row is left out of the picks for `down_ms`;
// after that connections try it again (one failure more marks it down again at once), and a
// handshake that completes counts it healthy. A connection never waits for it: a failed
// handshake fails over to another backend (both paths). One per rule in a fast-path worker or
// a kernel-path thread; single-threaded, O(backends).
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "forwarder/balance.h"
#include "forwarder/rules.h"

namespace xdpfwd {

class PassiveHealth {
 public:
  static constexpr uint32_t kFall = 3;
  static constexpr uint64_t kDownMs = 2000;

  explicit PassiveHealth(size_t backends, uint32_t fall = kFall, uint64_t down_ms = kDownMs)
      : fall_(fall), down_ms_(down_ms), failures_(backends, 0), down_until_(backends, 0) {}

  // The backends not marked down at `now_ms`, a bit each (BackendPicker::Pick's `up`).
  uint64_t Up(uint64_t now_ms) const {
    uint64_t up = 0;
    for (size_t i = 0; i < down_until_.size(); ++i) {
      if (down_until_[i] <= now_ms) up |= uint64_t{1} << i;
    }
    return up;
  }
  // A handshake with backend i failed (refused, unreachable, timed out). True if that marked it
  // down just now.
  bool Failed(size_t i, uint64_t now_ms) {
    const bool was_up = down_until_[i] <= now_ms;
    if (++failures_[i] < fall_) return false;
    down_until_[i] = now_ms + down_ms_;
    return was_up;
  }
  void Succeeded(size_t i) {
    failures_[i] = 0;
    down_until_[i] = 0;
  }

 private:
  uint32_t fall_;
  uint64_t down_ms_;
  std::vector<uint32_t> failures_;    // in a row
  std::vector<uint64_t> down_until_;  // 0: up
};

// A backend's stable name for the source hash ("10.0.0.2:9001"), and the picker's view of a
// rule's backends.
std::vector<PickerBackend> PickerBackends(const std::vector<RuleBackend>& backends);

// The client's address as the source hash reads it: 4 bytes for IPv4 (and for an IPv4 client
// of a dual-stack listener, so it maps alike on both paths), 16 for IPv6; `out` holds 16.
size_t ClientAddressBytes(const sockaddr* client, uint8_t* out);

}  // namespace xdpfwd
