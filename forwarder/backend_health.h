// What a path's own backend handshakes say about each backend of a rule (passive health): a
// backend whose handshakes fail `fall` times in a row is marked down and left out of the picks
// for `down_ms`. After that one connection tries it (the trial) while it stays out of every
// other pick: the trial's handshake completing marks it up, failing marks it down for another
// `down_ms` at once, and the trial's connection ending without a verdict (the client gone, its
// connect timeout) lets the next pick try it instead. So a death costs `fall` failed handshakes
// (more only for those already under way when it died) and one more per `down_ms` it lasts. A
// success clears the failures only if its handshake began after the backend's latest failure:
// one begun before a death and answered after its first refusals says nothing about the
// backend now. A connection never waits for any of this: a failed handshake fails over to
// another backend (both paths). One per rule in a fast-path worker or a kernel-path thread;
// single-threaded, O(backends).
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "forwarder/balance.h"
#include "forwarder/rules.h"

namespace xdpfwd {

// One connection's handshake with a backend as passive health follows it, kept with the
// connection from PassiveHealth::Began until the handshake's verdict or the connection's end.
struct HealthAttempt {
  uint64_t began_ms = 0;
  bool trial = false;  // the backend's one try after its down period
};

class PassiveHealth {
 public:
  static constexpr uint32_t kFall = 3;
  static constexpr uint64_t kDownMs = 2000;

  explicit PassiveHealth(size_t backends, uint32_t fall = kFall, uint64_t down_ms = kDownMs)
      : fall_(fall), down_ms_(down_ms), backends_(backends) {}

  // The backends a pick may take at `now_ms`, a bit each (BackendPicker::Pick's `up`): those not
  // marked down, and those whose down period is over and whose trial is not under way.
  uint64_t Up(uint64_t now_ms) const;
  // A connection's handshake with backend i begins (it was picked, or failed over to it): the
  // trial if the backend's down period is over and no trial is under way.
  HealthAttempt Began(size_t i, uint64_t now_ms);
  // The handshake `a` with backend i failed (refused, unreachable, timed out). True if that
  // marked the backend down just now (the `fall`th failure in a row, or a failed trial).
  bool Failed(size_t i, uint64_t now_ms, HealthAttempt& a);
  // The handshake `a` with backend i completed: the backend is up, unless a failure came after
  // the handshake began.
  void Succeeded(size_t i, HealthAttempt& a);
  // The connection of handshake `a` with backend i ended before a verdict: a trial is no longer
  // under way. Harmless after Failed or Succeeded (they clear `a.trial`).
  void Abandoned(size_t i, HealthAttempt& a);

 private:
  struct Backend {
    uint32_t failures = 0;    // in a row, up to fall_
    uint64_t down_until = 0;  // 0: up
    uint64_t failed_ms = 0;   // the latest failure
    bool trying = false;      // its trial is under way
  };
  uint32_t fall_;
  uint64_t down_ms_;
  std::vector<Backend> backends_;
};

// A backend's stable name for the source hash ("10.0.0.2:9001"), and the picker's view of a
// rule's backends.
std::vector<PickerBackend> PickerBackends(const std::vector<RuleBackend>& backends);

// The client's address as the source hash reads it: 4 bytes for IPv4 (and for an IPv4 client
// of a dual-stack listener, so it maps alike on both paths), 16 for IPv6; `out` holds 16.
size_t ClientAddressBytes(const sockaddr* client, uint8_t* out);

}  // namespace xdpfwd
